#!/usr/bin/env bash
# tests/chaos/run.sh --points N [--seed S] [other walfeed_chaos flags]
#
# Builds walfeed_chaos and walfeed-server in build/ if needed (under the shared
# build lock) and runs the verifier. The seed is printed; pass it back with
# --seed to replay the same fault schedule.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${WALFEED_BUILD_DIR:-$root/build}"
if ! cmake -S "$root" -B "$build" >/dev/null; then
  echo "run.sh: cmake configure failed" >&2
  exit 1
fi
flock /tmp/walfeed-build.lock cmake --build "$build" --target walfeed_chaos walfeed-server -j2
exec "$build/tests/chaos/walfeed_chaos" "$@"
