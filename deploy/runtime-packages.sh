#!/usr/bin/env bash
# Prints, one per line, the Debian packages whose shared libraries the given
# binaries load: what a runtime image needs installed (the Dockerfile's second
# stage). Fails naming any library no installed package provides.
#
#   deploy/runtime-packages.sh build/server/walfeed-server build/client/walfeed
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: deploy/runtime-packages.sh BINARY..." >&2
  exit 2
fi
mapfile -t libraries < <(for binary in "$@"; do ldd "$binary"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)
# dpkg knows a file by the path its package installed, which under the merged
# /usr may be the /lib one, and by the name, not the symlink target: ask for
# every candidate at once (one dpkg run), then take each library's first hit.
candidates() {
  local real
  real=$(readlink -f "$1")
  printf '%s\n' "$1" "$real" "${1#/usr}" "${real#/usr}"
}
declare -A owner_of=()
while IFS= read -r line; do
  owner_of["${line#*: }"]="${line%%:*}"
done < <(for library in "${libraries[@]}"; do candidates "$library"; done | sort -u |
  xargs dpkg -S 2>/dev/null || true)
missing=0
owners=()
for library in "${libraries[@]}"; do
  owner=""
  while IFS= read -r path; do
    owner="${owner_of[$path]:-}"
    [ -n "$owner" ] && break
  done < <(candidates "$library")
  if [ -z "$owner" ]; then
    echo "runtime-packages: no installed package provides $library" >&2
    missing=1
    continue
  fi
  owners+=("$owner")
done
printf '%s\n' "${owners[@]}" | sort -u
exit $missing
