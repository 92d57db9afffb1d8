#!/usr/bin/env bash
# Assembles the importable `walfeed` package into OUT (the package's sources
# and its gRPC stubs, generated from proto/), without installing it:
#
#   bash client/python/build.sh OUT && PYTHONPATH=OUT /usr/bin/python3 -c 'import walfeed'
#
# `pip install client/python` does the same at build time (setup.py).
set -euo pipefail
if [ $# -ne 1 ]; then echo "usage: $0 OUT" >&2; exit 2; fi
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$1"
out="$(cd "$1" && pwd)"
rm -rf "$out/walfeed"
mkdir -p "$out/walfeed"
cp "$here"/walfeed/*.py "$out/walfeed/"
protoc -I "$here/../../proto" --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin walfeed/v1/change_stream.proto
touch "$out/walfeed/v1/__init__.py"
