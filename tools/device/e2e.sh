#!/usr/bin/env bash
# On the GPU machine (docs/gpu.md): ds4j serve with backend hip, a flash-shaped FP8/FP4 target, the target itself as
# the draft model, q = 4 — once with the F16-KV verifier on (--fused-verify-f16-kv) and once with the control — and one
# streamed chat completion from the official openai npm client against each (tools/e2e/chat-transcript.mjs, with
# include_usage). Transcripts and server logs go to $OUT: transcript-f16.json, transcript-control.json, serve-*.log.
# Node is not installed there, and Node with .device does not fit one call's 64 MiB: a first call carries .node/ (node.xz
# and openai.tar.xz, made by tools/device/pack-node.sh) and runs `tools/device/e2e.sh --setup-only`, which unpacks them
# into $DS4J_NODE_DIR (default /tmp/ds4j-node); the next call, made while the machine is still held (it is given back
# after 30 s idle), carries .device and runs `tools/device/e2e.sh`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="${OUT:-$root/out}"; mkdir -p "$out"
nd="${DS4J_NODE_DIR:-/tmp/ds4j-node}"
if [ -f .node/node.xz ] && [ ! -x "$nd/node" ]; then
  mkdir -p "$nd" && xz -dc .node/node.xz > "$nd/node.tmp" && chmod +x "$nd/node.tmp" && mv "$nd/node.tmp" "$nd/node"
  tar -C "$nd" -xJf .node/openai.tar.xz
fi
[ -x "$nd/node" ] || { echo "no Node in $nd: run tools/device/pack-node.sh, then a call carrying .node with e2e.sh --setup-only" >&2; exit 1; }
[ -d src/test/node/node_modules/openai ] || { mkdir -p src/test/node && cp -r "$nd/node_modules" src/test/node/; }
[ "${1:-}" = "--setup-only" ] && { "$nd/node" --version; exit 0; }
model="${DS4J_E2E_MODEL:-${DS4J_DEVICE_WORK:-/tmp/ds4j-device}/home/models/flash-shaped-L4-E16-fp8-seed1}"
[ -f "$model/config.json" ] || tools/device/run.sh ds4j make-model --preset flash-shaped --layers 4 --seed 1 --naming original --dtype fp8 --out "$model"
port="${DS4J_PORT:-18080}"
for mode in f16 control; do
  flags=(); [ "$mode" = f16 ] && flags=(--fused-verify-f16-kv)
  tools/device/run.sh serve --model "$model" --draft "$model" --spec-q 4 --port "$port" "${flags[@]}" > "$out/serve-$mode.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 240); do
    python3 -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$port/health').status==200 else 1)" 2>/dev/null && break
    kill -0 $pid 2>/dev/null || { echo "serve exited:"; tail -20 "$out/serve-$mode.log"; exit 1; }
    sleep 0.5
  done
  echo "== $mode"
  "$nd/node" tools/e2e/chat-transcript.mjs "http://127.0.0.1:$port" "$out/transcript-$mode.json" "${DS4J_E2E_SECTIONS:-300}" "${DS4J_E2E_TOKENS:-64}"
  kill $pid; wait $pid 2>/dev/null || true
  grep -E "verify attention|expert placement|decided|WARN" "$out/serve-$mode.log" | head -12 || true
done
