#!/usr/bin/env bash
# API checks on proto/: `buf lint` (the rules in buf.yaml: STANDARD + COMMENTS, so
# every message, field, enum value and RPC is documented for generated clients) and
# `buf breaking` against the previous commit (WIRE_JSON rules), so walfeed.v1 only
# grows compatibly: no field renumbered, retyped or removed, no RPC removed.
# buf comes from npm (@bufbuild/buf, pinned) into .tools/, installed on first use.
set -euo pipefail
cd "$(dirname "$0")/.."

BUF_VERSION=1.75.0
BUF=".tools/node_modules/.bin/buf"
if [ ! -x "$BUF" ] || [ "$("$BUF" --version)" != "$BUF_VERSION" ]; then
  if ! command -v npm >/dev/null; then
    echo "check_api: npm is missing: installing Debian's npm"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y \
      --no-install-recommends npm >/dev/null
  fi
  mkdir -p .tools
  npm install --prefix .tools --no-audit --no-fund --silent "@bufbuild/buf@$BUF_VERSION"
fi
echo "=== buf lint ==="
"$BUF" lint
echo "buf lint: clean"

echo "=== buf breaking against HEAD~1 ==="
if ! git rev-parse --verify -q HEAD~1 >/dev/null; then
  echo "buf breaking: no previous commit to compare with"
elif [ -z "$(git ls-tree -r --name-only HEAD~1 -- proto | grep '\.proto$')" ]; then
  echo "buf breaking: the previous commit has no API yet"
else
  "$BUF" breaking --against '.git#ref=HEAD~1'
  echo "buf breaking: compatible with HEAD~1"
fi
