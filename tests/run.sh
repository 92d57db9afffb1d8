#!/usr/bin/env bash
# The one test command: installs dependencies, builds, and runs every test.
#
#   bash tests/run.sh            everything (what CI runs)
#   bash tests/run.sh gcc        only the gcc build and its tests (quicker while developing)
#   bash tests/run.sh clang      only the clang build: -Wthread-safety, ASan+UBSan, fuzzers
#   bash tests/run.sh api        only the API checks (buf lint on proto/)
#
# Two builds, both incremental (ccache) and -Werror when CI is set:
#   build/        g++, RelWithDebInfo: every test (labels unit, integration, e2e, fuzz replay)
#   build-clang/  clang++-14 with -Wthread-safety, AddressSanitizer + UBSan and the
#                 libFuzzer targets: unit tests, then fuzz corpus replay and a bounded
#                 fuzzing run of WALFEED_FUZZ_SECONDS (default 30) per target.
set -euo pipefail
cd "$(dirname "$0")/.."

stage="${1:-all}"
case "$stage" in all|gcc|clang|api) ;; *) echo "usage: $0 [all|gcc|clang|api]" >&2; exit 2 ;; esac

bash deploy/install-deps.sh

if [ "$stage" = all ] || [ "$stage" = api ]; then
  bash tests/check_api.sh
fi

werror=OFF
if [ -n "${CI:-}" ]; then werror=ON; fi
jobs="$(nproc)"

if [ "$stage" = all ] || [ "$stage" = gcc ]; then
  echo "=== gcc build (build/) ==="
  cmake -S . -B build -DWALFEED_WERROR="$werror" >/dev/null
  cmake --build build -j"$jobs"
  ctest --test-dir build --output-on-failure -j"$jobs"
fi

if [ "$stage" = all ] || [ "$stage" = clang ]; then
  echo "=== clang build (build-clang/): thread safety, ASan+UBSan, fuzzers ==="
  CXX=clang++-14 cmake -S . -B build-clang -DWALFEED_WERROR="$werror" \
    -DWALFEED_THREAD_SAFETY=ON -DWALFEED_SANITIZE=ON -DWALFEED_FUZZ=ON \
    -DWALFEED_FUZZ_SECONDS="${WALFEED_FUZZ_SECONDS:-30}" >/dev/null
  cmake --build build-clang -j"$jobs"
  ctest --test-dir build-clang --output-on-failure -j"$jobs" -L 'unit|fuzz'
fi
