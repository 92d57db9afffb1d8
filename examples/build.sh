#!/usr/bin/env bash
# Makes the example consumers runnable: assembles the Python package with its
# stubs (client/python/build.sh) and generates the Go stubs from proto/, builds
# the Go consumer, installs the Node package's modules, and writes one launcher per
# language with the same command line:
#
#   bash examples/build.sh OUT
#   OUT/bin/{python,node,go}-consumer --server HOST:PORT --stream S --consumer C \
#       --out FILE [--ack-every N]
#   OUT/bin/{python,node,go}-effect-once --server HOST:PORT --stream S --consumer C \
#       --dest-dsn DSN [--crash-after-commit N]   (exactly-once effects in PostgreSQL)
#
# Generated code goes to OUT only (it is never committed); the Node modules go to
# client/node/node_modules (npm ci, from the committed package-lock.json), and
# are reinstalled only when the lock file changed. The CMake target
# walfeed_example_clients runs this into <build>/examples.
#
# Needs (deploy/install-deps.sh installs them): protoc, grpc_python_plugin,
# /usr/bin/python3 with python3-grpcio, python3-protobuf and python3-psycopg2, go with
# protoc-gen-go, protoc-gen-go-grpc and Debian's grpc-go, protobuf-go and genproto
# sources (GOPATH mode: no module proxy needed; genproto's errdetails has the
# google.rpc error details), node and npm.
set -euo pipefail

if [ $# -ne 1 ]; then echo "usage: $0 OUT" >&2; exit 2; fi
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$1"
out="$(cd "$1" && pwd)"
proto=walfeed/v1/change_stream.proto
for tool in protoc /usr/bin/grpc_python_plugin /usr/bin/python3 go protoc-gen-go \
    protoc-gen-go-grpc node npm; do
  if ! command -v "$tool" >/dev/null; then
    echo "examples/build.sh: $tool is missing: run deploy/install-deps.sh" >&2
    exit 1
  fi
done
mkdir -p "$out/bin"

# Python: the walfeed package (client/python) with its messages (_pb2) and
# stubs (_pb2_grpc) from the system protoc; it reads the google.rpc error
# details itself (Debian's python3-grpcio has no grpc_status module).
rm -rf "$out/python"
mkdir -p "$out/python/gen"
bash "$root/client/python/build.sh" "$out/python/gen"
/usr/bin/python3 -c 'import grpc, google.protobuf, psycopg2' 2>/dev/null || {
  echo "examples/build.sh: /usr/bin/python3 lacks grpc, protobuf or psycopg2: run deploy/install-deps.sh" >&2
  exit 1
}

# Go, in GOPATH mode: the generated package lands at its go_package import path
# (walfeed/gen/go/walfeed/v1) under OUT/go/src, next to a copy of the example.
# The google.rpc details come from Debian's genproto (errdetails), which grpc-go's
# status package already uses for google.rpc.Status: generating them again here
# would register the same proto files twice.
gopath="$out/go"
rm -rf "$gopath/src" "$gopath/bin"
mkdir -p "$gopath/src/walfeed/examples/go"
protoc -I "$root/proto" --go_out="$gopath/src" --go-grpc_out="$gopath/src" "$proto"
cp "$root/examples/go/main.go" "$gopath/src/walfeed/examples/go/"
# The walfeed Go package (client/go/walfeed), which the consumer uses.
mkdir -p "$gopath/src/walfeed/client/go/walfeed"
cp "$root"/client/go/walfeed/*.go "$gopath/src/walfeed/client/go/walfeed/"
if [ -z "${HOME:-}" ] && [ -z "${GOCACHE:-}" ]; then export GOCACHE="$gopath/cache"; fi
mkdir -p "$gopath/src/walfeed/examples/go/effect_once"
cp "$root/examples/go/effect_once/main.go" "$gopath/src/walfeed/examples/go/effect_once/"
GO111MODULE=off GOPATH="$gopath:/usr/share/gocode" \
  go build -o "$out/bin/go-consumer" walfeed/examples/go
GO111MODULE=off GOPATH="$gopath:/usr/share/gocode" \
  go build -o "$out/bin/go-effect-once" walfeed/examples/go/effect_once

# Node: the consumers run on the walfeed package (client/node), which loads the
# .proto at run time; only modules are installed, the package's and the
# examples' own (pg, for effect_once.js). flock: two build directories share
# the node_modules folders.
for dir in "$root/client/node" "$root/examples/node"; do
  (
    cd "$dir"
    flock 9
    if ! cmp -s package-lock.json node_modules/.walfeed-installed-lock 2>/dev/null; then
      npm ci --no-audit --no-fund --loglevel=error
      cp package-lock.json node_modules/.walfeed-installed-lock
    fi
  ) 9<"$dir/package.json"
done

# Launchers: the same command line for every language.
cat >"$out/bin/python-consumer" <<EOF
#!/bin/sh
PYTHONPATH="$out/python/gen\${PYTHONPATH:+:\$PYTHONPATH}" exec /usr/bin/python3 "$root/examples/python/consumer.py" "\$@"
EOF
cat >"$out/bin/python-effect-once" <<EOF
#!/bin/sh
PYTHONPATH="$out/python/gen\${PYTHONPATH:+:\$PYTHONPATH}" exec /usr/bin/python3 "$root/examples/python/effect_once.py" "\$@"
EOF
cat >"$out/bin/node-consumer" <<EOF
#!/bin/sh
exec node "$root/examples/node/consumer.js" "\$@"
EOF
cat >"$out/bin/node-effect-once" <<EOF
#!/bin/sh
exec node "$root/examples/node/effect_once.js" "\$@"
EOF
chmod +x "$out/bin/python-consumer" "$out/bin/python-effect-once" "$out/bin/node-consumer" \
  "$out/bin/node-effect-once"
echo "examples/build.sh: consumers ready in $out/bin"
