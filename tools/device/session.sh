#!/usr/bin/env bash
# One device call (docs/gpu.md): runs the phases named in $1 (comma list) with time limits, logs under $OUT. Phases: info, test, verify-attn, sanitize, bench, bench-long, attn-bench, f16kv, e2e, serve, prefix-test, prefix-agent, prefix-doc, batch-test, batch-bench, batch-json, batch-gbnf, batch-long, step-profile, split-ab, wgmma-mm, wgmma-bench, launches-ab, env-mm, env-bench.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="${OUT:-$root/out}"; mkdir -p "$out"
phases="${1:-info,test,bench,serve}"
run() { # name, seconds, command...
  local name=$1 secs=$2; shift 2
  echo "=== $name (limit ${secs}s)"
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "=== $name: rc=$rc in $((SECONDS - t0))s"
  grep -v -E '^\s*$|Using incubator modules' "$out/$name.log" | tail -"${TAILN:-25}"
}
for p in ${phases//,/ }; do
  case "$p" in
    info) run info 60 bash -c 'nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv; tools/device/run.sh java -version; true' ;;
    test) TAILN=60 run test 300 tools/device/run.sh test ;;
    sanitize) TAILN=30 run sanitize 420 tools/device/run.sh sanitize --select-class io.ds4j.gpu.GpuOpsTest \
                --select-class io.ds4j.gpu.HipBackendTest --select-class io.ds4j.gpu.HipReferenceParityTest \
                --select-method io.ds4j.gpu.HipVerifyAttentionTest#atOrUnderTheThresholdTheF16PathEqualsTheControl \
                --select-method io.ds4j.gpu.HipVerifyAttentionTest#overTheThresholdTheF16PathEqualsTheControlWithin1e5 \
                --select-method io.ds4j.gpu.HipVerifyAttentionTest#indexerScoresOnF32CopiesEqualTheF16Ones \
                --select-method io.ds4j.gpu.HipVerifyAttentionTest#underTheThresholdWholeStepsAreBitIdenticalAndStatusFollowsTheSwitch \
                --select-method io.ds4j.gpu.HipPlacementTest#autoIsMonolithicExactlyWhenTheModelFits \
                --select-method io.ds4j.gpu.HipPlacementTest#memoryReportListsEveryCategory ;;
    bench) run bench 150 tools/device/run.sh bench --preset flash-shaped --dtype fp8 --prompt-tokens 4096 --chunk 512 --decode-tokens 32 --contexts 4096 ;;
    bench-long) run bench-long 200 tools/device/run.sh bench --preset flash-shaped --dtype fp8 --prompt-tokens 4096 --chunk 512 --decode-tokens 32 --contexts 4096,59933,122879 ;;
    f16kv) TAILN=40 run f16kv 420 tools/device/run.sh ds4j bench --out "$out/bench" ;;
    verify-attn) TAILN=40 run verify-attn 240 tools/device/run.sh test --select-class io.ds4j.gpu.HipVerifyAttentionTest ;;
    attn-bench) TAILN=20 run attn-bench 150 tools/device/run.sh attn-bench --contexts 4096,59933,122879 --queries 5 --reps 200 ;;
    e2e) TAILN=40 run e2e 300 tools/device/e2e.sh ;;
    serve) run serve 60 tools/device/run.sh serve-smoke ;;
    prefix-test) TAILN=30 run prefix-test 300 tools/device/run.sh test --select-class io.ds4j.gpu.HipPrefixCacheTest ;;
    prefix-agent) TAILN=30 run prefix-agent 560 tools/device/run.sh ds4j bench-prefix --backend hip --preset flash-shaped --layers 43 --experts 16 --dtype fp8 --workloads agent ;;
    prefix-doc) TAILN=30 run prefix-doc 560 tools/device/run.sh ds4j bench-prefix --backend hip --preset flash-shaped --layers 43 --experts 16 --dtype fp8 --workloads doc --doc-tokens 32768 ;;
    batch-test) TAILN=30 run batch-test 300 tools/device/run.sh test --select-class io.ds4j.gpu.HipBatchInvarianceTest ;;
    batch-bench) TAILN=30 run batch-bench 560 tools/device/run.sh ds4j bench-server --backend hip --preset flash-shaped --layers 43 --experts 16 --dtype fp8 --clients 1,4,16,64 --requests 16 --max-tokens 64 --skip-engine-alone ;;
    # every request held to one JSON schema at 1, 16 and 64 streams (constrained decoding at concurrency: the shared
    # grammar masks and the constrained rows sampled on the host's 16 cores); A/B against an older jar by checking one out
    batch-json) TAILN=30 run batch-json 560 tools/device/run.sh ds4j bench-server --backend hip --preset flash-shaped --layers 43 --experts 16 --dtype fp8 --clients 1,16,64 --requests 16 --max-tokens 128 --json-schema tools/schemas/bench-person.json ;;
    batch-gbnf) TAILN=30 run batch-gbnf 560 tools/device/run.sh ds4j bench-server --backend hip --preset flash-shaped --layers 43 --experts 16 --dtype fp8 --clients 1,16,64 --requests 16 --max-tokens 128 --grammar tools/grammars/bench-person.gbnf ;;
    batch-long) TAILN=30 run batch-long 560 tools/device/run.sh ds4j bench-server --backend hip --preset flash-shaped --layers 43 --experts 16 --dtype fp8 --clients 16 --requests 16 --max-tokens 256 --long-prompt 32768 --skip-engine-alone ;;
    # one full-depth decode step kernel by kernel (DS4J_PROFILE_STEP: the 8th forward step of this bench is a decode
    # step), summed by kernel; the raw CSV stays in $OUT/step-profile.csv
    step-profile) TAILN=45 run step-profile 300 bash -c 'JAVA_TOOL_OPTIONS=-Dds4j.gpu.graphs=off DS4J_PROFILE_STEP=8 \
        /usr/local/cuda/bin/ncu --profile-from-start off --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --page raw tools/device/run.sh bench --layers 43 \
        --prompt-tokens 512 --contexts 4096 --max-prefill 0 --decode-tokens 2 --graph-rounds 0 --verify-rows 5 --batches 1 \
        > "$0/step-profile.csv" && tools/device/ncu-summary.py "$0/step-profile.csv"' "$out" ;;
    # the skinny products' column split (DS4J_SKINNY_SPLIT) from the shape, never and always: whole-model decode and
    # verify at full depth, then the one-layer products with their result hashes (equal hashes: same bits)
    split-ab) TAILN=60 run split-ab 420 bash -c 'for v in 2 0 1 2 0; do echo "DS4J_SKINNY_SPLIT=$v"; DS4J_SKINNY_SPLIT=$v \
        tools/device/run.sh bench --layers 43 --prompt-tokens 512 --contexts 4096 --max-prefill 0 --decode-tokens 32 \
        --graph-rounds 2 --verify-rows 5 --batches 1 2>&1 | grep -E " on: .*median|verify step of"; done;
        for v in 2 0 1; do echo "DS4J_SKINNY_SPLIT=$v"; DS4J_SKINNY_SPLIT=$v tools/device/run.sh mm-bench --rows 1,5,16 \
        --reps 100 2>&1 | grep -E "^\| [a-z]"; done' ;;
    # the staged skinny products of 2 .. 8 n-tiles on warpgroup MMAs against mma.sync (DS4J_SKINNY_WGMMA=0),
    # alternating in one call: the one-layer products of every format on them (28) with their result hashes (equal
    # hashes: same bits); the full-depth engine's decode, verify and batched steps with the FP8 ones (8, the default)
    wgmma-mm) TAILN=80 run wgmma-mm 420 bash -c 'for v in 0 28 0 28; do echo "DS4J_SKINNY_WGMMA=$v"; \
        DS4J_SKINNY_WGMMA=$v tools/device/run.sh mm-bench --rows 16,32,64 --reps 50 2>&1 | grep -E "^\| [a-z]"; done' ;;
    wgmma-bench) TAILN=60 run wgmma-bench 560 bash -c 'for v in 8 0 8 0; do echo "DS4J_SKINNY_WGMMA=$v"; \
        DS4J_SKINNY_WGMMA=$v tools/device/run.sh bench --layers 43 --prompt-tokens 512 --contexts 4096 --max-prefill 0 \
        --decode-tokens 8 --graph-rounds 1 --verify-rows 5 --batches 1,16,64 2>&1 | grep -E "prefill:|on: .*median|verify step of|batch +[0-9]"; done' ;;
    # the router in one launch and the partial sums left to the SwiGLU (-Dds4j.gpu.fusedRouter, off by default, and
    # -Dds4j.gpu.partialsToReaders, on by default) off and on, alternating, in full-depth engine steps: $LAUNCHES_AB lists the runs, each two
    # letters (t / f: the router, the partials), default "ff tt ff tt"
    launches-ab) TAILN=60 run launches-ab 580 bash -c 'for v in ${LAUNCHES_AB:-ff tt ff tt}; do \
        fr=$([ "${v:0:1}" = t ] && echo true || echo false); pr=$([ "${v:1:1}" = t ] && echo true || echo false); \
        echo "fusedRouter=$fr partialsToReaders=$pr"; \
        JAVA_TOOL_OPTIONS="-Dds4j.gpu.fusedRouter=$fr -Dds4j.gpu.partialsToReaders=$pr" tools/device/run.sh bench --layers 43 \
        --prompt-tokens 512 --contexts 4096 --max-prefill 0 --decode-tokens 8 --graph-rounds 1 --verify-rows 5 --batches 1,16,64 \
        2>&1 | grep -E "prefill:|on: .*median|verify step of|batch +[0-9]"; done' ;;
    # measurement switches A/B, alternating in one call: $ENV_AB lists the runs, each a comma-joined list of environment
    # assignments (e.g. "DS4J_SKINNY_L2=10 DS4J_SKINNY_L2=25,DS4J_SKINNY_XLOADS=1"); env-mm times the one-layer products (rows
    # $MM_ROWS, default 1,5; $MM_ONLY limits them) with their result hashes, env-bench the full-depth engine steps
    env-mm) TAILN=80 run env-mm 420 bash -c 'for v in ${ENV_AB:?}; do echo "$v"; env ${v//,/ } tools/device/run.sh mm-bench \
        --rows ${MM_ROWS:-1,5} --reps 50 ${MM_ONLY:+--only "$MM_ONLY"} 2>&1 | grep -E "^\| [a-z]"; done' ;;
    # env-bench starts with a warm-up run of the first setting, not to be compared: on the H100s lent in the fifty-fourth
    # session a call's first run was the fastest of its call whatever its setting (a 5-row verify step 19.3 ms, then 21-23)
    env-bench) TAILN=60 run env-bench 580 bash -c 'v0=${ENV_AB%% *}; for v in "$v0" ${ENV_AB:?}; do [ -n "${w:-}" ] && echo "$v" \
        || { w=1; echo "warm-up ($v0, not compared)"; }; env ${v//,/ } tools/device/run.sh bench \
        --layers 43 --prompt-tokens 512 --contexts 4096 --max-prefill 0 --decode-tokens 8 --graph-rounds 1 --verify-rows 5 \
        --batches 1,16,64 2>&1 | grep -E "prefill:|on: .*median|verify step of|batch +[0-9]"; done' ;;
    *) echo "unknown phase $p" >&2; exit 2 ;;
  esac
done
