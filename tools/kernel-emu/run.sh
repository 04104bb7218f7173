#!/usr/bin/env bash
# Checks the tensor-core kernels (src/main/native/src/gemm_tc.cpp, gemm_skinny.cpp, indexer_tc.cpp, the top-k of indexer.cpp and the
# F16-in-place attention of attention.cpp), the split F32 attention of attention.cpp (decode / verify / several
# sequences), the compressor pooling of compressor.cpp and the row-wise kernels of norm.cpp, mhc.cpp and moe_routing.cpp
# on the CPU, without a GPU:
# their sources are compiled with g++ against a host emulation of the CUDA subset they use (emu.h) and run against
# F64 references (driver.cpp). It finds indexing mistakes (tiles, tails, fragments, grouping by expert); it says
# nothing about speed or the tensor cores' own rounding, which only the GPU tests measure. Needs g++ 12 or newer
# (C++20, _Float16) and python3; long on two cores (each block's threads are OS threads): on the 2-core build VM
# MOE_ONLY=1 took ~8 min and SKINNY_ONLY=1 35-50 min (2026-12-02); EXTRA=1 adds slower cases. The skinny cases run
# seven times: as built, and with DS4J_SKINNY_WIDE_MT=1, DS4J_SKINNY_WIDE=0, DS4J_SKINNY_XLOADS=1 (the grouped x loads of
# the staging, BF16, F16 and FP4 weights), DS4J_SKINNY_XLOADS=0 (none: the default, the same as built),
# DS4J_SKINNY_XASYNC=30 (x staged by cp.async for every format) and DS4J_SKINNY_XASYNC=0 (for none) (SKINNY_ONLY=1 stops after them; the slow routed-expert
# cases of 1 and 5 rows, which the two WIDE settings do not touch, skip those two runs); each
# case also runs the staged-activation kernel (column split and not, whole and one-group slices), which must give the
# same bits. The prefill GEMM also runs with its activations split beforehand (DS4J_TC_XSPLIT's pre-pass), which must give
# the same bits; TC_ONLY=1 "$WORK_DIR/driver" runs only the prefill GEMM cases (TC_EDGE=1 only its FP8 / FP4 decoding at every kind of
# scale byte), COMP_ONLY=1 only the compressor pooling (one block a window, and in channel slices) against the earlier kernel's order (seconds), MHC_ONLY=1 only the row-wise kernels of
# norm.cpp, mhc.cpp and moe_routing.cpp (split mHC, RMSNorm, router) against their one-block kernels, MOE_ONLY=1 only the routed-expert cases of the
# staged kernel's grid over distinct experts and row groups per block, SPLIT_ONLY=1 only the split F32 attention (both
# block sizes, which must give the same bits; each case prints an output hash, to compare two builds: ~12 min on the
# 2-core VM, 2026-12-02), ATT_ONLY=1 only the F16-operand (tensor-core) attention and TOPK_ONLY=1 only the Lightning
# Indexer's top-k (one-block and multi-block kernels), IDX_ONLY=1 only its tensor-core scores (the decode / verify kernel
# against the prefill kernel and an F64 reference), EDGES_ONLY=1 only adversarial cases of those two (all keys equal or NaN,
# keys differing in one byte, crossings at lane and bin edges, rows above 65,535 keys; zero, subnormal, huge and
# non-finite query rows; EDGES_IDX_QUICK=1 one indexer shape, EDGES_TOPK=0 / EDGES_IDX=0 one half). LEAN_ONLY=1 runs only the lean FP8 and BF16 instance of the staged
# kernel (gemm_skinny.cpp, sm_lean) at the edges of its host conditions, with slices of 2, 3 and 5 chunk groups and no
# padding past a matrix's bytes (build the driver with -fsanitize=address to have any read past them reported;
# LEAN_SHAPE=N runs case N only); every case must give the generic instance's bits.
#   tools/kernel-emu/run.sh [WORK_DIR]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="${1:-${TMPDIR:-/tmp}/ds4j-kernel-emu}"
mkdir -p "$work"
python3 "$here/gen.py" "$root/src/main/native" "$work"
cp "$here/emu.h" "$here/driver.cpp" "$here/mhc_cases.h" "$work/"
g++ -std=c++20 -O1 -ffp-contract=off -pthread -I"$work" "$work/driver.cpp" -o "$work/driver"
"$work/driver"
# the skinny products' alternatives, chosen by environment variables read once per process
SKINNY_ONLY=1 DS4J_SKINNY_WIDE_MT=1 "$work/driver"
SKINNY_ONLY=1 DS4J_SKINNY_WIDE=0 "$work/driver"
SKINNY_ONLY=1 DS4J_SKINNY_XLOADS=1 "$work/driver"
SKINNY_ONLY=1 DS4J_SKINNY_XLOADS=0 "$work/driver"
SKINNY_ONLY=1 DS4J_SKINNY_XASYNC=30 "$work/driver"
SKINNY_ONLY=1 DS4J_SKINNY_XASYNC=0 "$work/driver"
# the lean instance at the edges of its conditions (quick: seconds a case)
LEAN_ONLY=1 "$work/driver"
