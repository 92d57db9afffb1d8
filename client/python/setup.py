"""Builds the package with its gRPC stubs, generated from the repository's
proto/ (WALFEED_PROTO_DIR overrides where) by protoc and grpc_python_plugin at
build time: generated code is never committed."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        proto = os.environ.get("WALFEED_PROTO_DIR") or os.path.join(HERE, "..", "..", "proto")
        plugin = shutil.which("grpc_python_plugin")
        if not shutil.which("protoc") or not plugin:
            raise SystemExit("walfeed: building needs protoc and grpc_python_plugin "
                             "(Debian: apt-get install protobuf-compiler protobuf-compiler-grpc)")
        subprocess.check_call(["protoc", "-I", proto, f"--python_out={self.build_lib}",
                               f"--grpc_python_out={self.build_lib}",
                               f"--plugin=protoc-gen-grpc_python={plugin}",
                               "walfeed/v1/change_stream.proto"])
        open(os.path.join(self.build_lib, "walfeed", "v1", "__init__.py"), "a").close()


setup(cmdclass={"build_py": BuildWithStubs})
