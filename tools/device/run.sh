#!/usr/bin/env bash
# Runs ds4j on the GPU machine (no JDK there) from what tools/device/pack.sh put into .device/. From the repo root:
#   tools/device/run.sh test [JUnit console options]   the GPU test suite (JUnit tests tagged "gpu" in io.ds4j.gpu)
#   tools/device/run.sh bench [GpuBench options]       the GPU benchmark (io.ds4j.gpu.GpuBench; default flash-shaped fp8)
#   tools/device/run.sh attn-bench [options]           one layer's verify attention, both paths (io.ds4j.gpu.VerifyAttentionBench)
#   tools/device/run.sh mm-bench [options]             one layer's matrix products at decode sizes (io.ds4j.gpu.MatmulBench)
#   tools/device/run.sh serve [ds4j serve options]     ds4j serve --backend hip (foreground)
#   tools/device/run.sh serve-smoke                    starts serve --backend hip, sends one chat completion, stops
#   tools/device/run.sh sanitize [JUnit options]       the GPU tests under compute-sanitizer memcheck (DS4J_SANITIZER_TOOL:
#                                                       racecheck, synccheck or initcheck instead)
#   tools/device/run.sh ds4j ARGS...                   any ds4j command (e.g. ds4j bench: the F16-KV verifier's matched table)
#   tools/device/run.sh java ARGS...                   the packed runtime with the app's class path
# Reports go to $OUT (the device tool's output folder) or ./out. DS4J_GPU_LIB=NAME runs any of them with the library
# tools/device/pack-lib.sh packed as NAME (an A/B of two native builds in one call).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
work="${DS4J_DEVICE_WORK:-/tmp/ds4j-device}"
out="${OUT:-$root/out}"
mkdir -p "$work" "$out"
[ -f .device/rt.tar.xz ] && [ -f .device/app.tar.xz ] || { echo "no .device/*.tar.xz: run tools/device/pack.sh and carry .device" >&2; exit 1; }
[ -x "$work/rt/bin/java" ] || tar -C "$work" -xJf .device/rt.tar.xz
if [ ! -f "$work/app/ds4j.jar" ] || [ .device/app.tar.xz -nt "$work/app/ds4j.jar" ]; then
  rm -rf "$work/app"; tar -C "$work" -xJf .device/app.tar.xz; touch "$work/app/ds4j.jar"
fi
java="$work/rt/bin/java"
# DS4J_GPU_LIB=NAME: the library tools/device/pack-lib.sh packed as .device/lib-NAME.so.xz instead of the jar's
if [ -n "${DS4J_GPU_LIB:-}" ]; then
  [ -f ".device/lib-$DS4J_GPU_LIB.so.xz" ] || { echo "no .device/lib-$DS4J_GPU_LIB.so.xz: run tools/device/pack-lib.sh REV $DS4J_GPU_LIB" >&2; exit 1; }
  lib="$work/lib-$DS4J_GPU_LIB.so"
  if [ ! -f "$lib" ] || [ ".device/lib-$DS4J_GPU_LIB.so.xz" -nt "$lib" ]; then
    xz -dc ".device/lib-$DS4J_GPU_LIB.so.xz" > "$lib.tmp" && mv "$lib.tmp" "$lib"
  fi
  export DS4J_GPU_LIBRARY="$lib"
fi
export DJL_OFFLINE=true OPT_OUT_TRACKING=true DS4J_HOME="${DS4J_HOME:-$work/home}"
# DS4J_GC: the collector flag (default -XX:+UseParallelGC, as bin/ds4j), e.g. -XX:+UseZGC for a comparison
flags=(--add-modules jdk.incubator.vector --enable-native-access=ALL-UNNAMED -Xss4m "${DS4J_GC:--XX:+UseParallelGC}")
cp="$(printf '%s:' "$work/app/ds4j.jar" "$work/app"/lib/*.jar)"; cp="${cp%:}"  # explicit: JUnit does not expand lib/*
junit=(-jar "$work/app/junit-console.jar" execute --class-path "$cp:$work/app/tests.jar" --disable-banner
       --details=tree --include-tag gpu --reports-dir "$out/junit")
cmd="${1:-test}"; shift || true
case "$cmd" in
  test) exec "$java" "${flags[@]}" "${junit[@]}" ${@:---select-package io.ds4j.gpu} ;;
  sanitize)
    sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
    [ -n "$sanitizer" ] || { echo "compute-sanitizer not found" >&2; exit 1; }
    exec "$sanitizer" --tool "${DS4J_SANITIZER_TOOL:-memcheck}" --target-processes all --error-exitcode 99 --print-limit 20 \
      "$java" "${flags[@]}" -Dds4j.sanitizer=true "${junit[@]}" ${@:---select-package io.ds4j.gpu} ;;
  bench) exec "$java" "${flags[@]}" -cp "$cp" io.ds4j.gpu.GpuBench "$@" ;;
  attn-bench) exec "$java" "${flags[@]}" -cp "$cp" io.ds4j.gpu.VerifyAttentionBench "$@" ;;
  mm-bench) exec "$java" "${flags[@]}" -cp "$cp" io.ds4j.gpu.MatmulBench "$@" ;;
  serve) exec "$java" "${flags[@]}" -cp "$cp" io.ds4j.cli.Main serve --backend hip "$@" ;;
  serve-smoke)
    port="${DS4J_PORT:-18080}"
    "$java" "${flags[@]}" -cp "$cp" io.ds4j.cli.Main serve --backend hip --port "$port" --draft none "$@" > "$out/serve-server.log" 2>&1 &
    pid=$!
    trap 'kill $pid 2>/dev/null || true' EXIT
    for _ in $(seq 1 240); do
      if python3 -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$port/health').status==200 else 1)" 2>/dev/null; then break; fi
      kill -0 $pid 2>/dev/null || { echo "serve exited:"; cat "$out/serve-server.log"; exit 1; }
      sleep 0.5
    done
    python3 - "$port" <<'PY'
import json, sys, time, urllib.request
port = sys.argv[1]
def get(path):
    return json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}{path}"))
print("models:", json.dumps(get("/v1/models")["data"][0].get("meta", {}))[:300])
body = json.dumps({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 24, "temperature": 0}).encode()
t0 = time.time()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body, {"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req))
print("chat completion in %.2f s:" % (time.time() - t0), json.dumps(r["choices"][0])[:300])
print("usage:", json.dumps(r.get("usage"))[:400])
PY
    echo "serve log (head):"; head -20 "$out/serve-server.log" ;;
  ds4j) exec "$java" "${flags[@]}" -cp "$cp" io.ds4j.cli.Main "$@" ;;
  java) exec "$java" "${flags[@]}" -cp "$cp" "$@" ;;
  *) echo "unknown command '$cmd' (test, sanitize, bench, attn-bench, mm-bench, serve, serve-smoke, ds4j, java)" >&2; exit 2 ;;
esac
