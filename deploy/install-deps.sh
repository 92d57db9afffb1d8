#!/usr/bin/env bash
# Installs everything walfeed needs to build and test, from Debian 12 packages only.
# Safe to run repeatedly. Needs root (or sudo). Waits if another apt/dpkg holds the lock
# instead of failing, because fresh machines often run unattended upgrades at boot.
set -euo pipefail

packages=(
  # build
  cmake g++ make pkg-config ccache clang-14 libclang-rt-14-dev
  # libraries
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libpq-dev libspdlog-dev libyaml-cpp-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev postgresql-15 postgresql-client-15 openssl
)

sudo_cmd=()
if [ "$(id -u)" != 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"

# apt-get's own lock timeout (seconds) makes it wait for a held dpkg lock.
apt_opts=(-o DPkg::Lock::Timeout=600 -y -q --no-install-recommends)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 -q update
"${sudo_cmd[@]}" apt-get "${apt_opts[@]}" install "${missing[@]}"
