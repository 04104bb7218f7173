#!/usr/bin/env bash
# Packs one more GPU library into .device/, to compare native builds in a single device call (the same machine, runs
# alternating: machines differ by more than most kernel changes).
#   tools/device/pack-lib.sh REV NAME    the library of git revision REV (a commit, a branch, or "WORKTREE" for the
#                                        working tree's src/main/native as it is) as .device/lib-NAME.so.xz
# on the device: DS4J_GPU_LIB=NAME tools/device/run.sh ...  runs with that library (DS4J_GPU_LIBRARY) instead of the
# jar's. Built for sm_90a machine code only and without -lineinfo (~1.5 MiB as xz), so that two fit beside the packed
# bundle; for that bundle to fit too, pack it without line info: DS4J_GPU_LINEINFO=0 tools/device/pack.sh (Nsight
# Compute's source view needs the line info: profile with a bundle packed with it). Needs nvcc, git, xz.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rev="${1:?usage: pack-lib.sh REV NAME}"
name="${2:?usage: pack-lib.sh REV NAME}"
[[ "$name" =~ ^[A-Za-z0-9_-]+$ ]] || { echo "pack-lib.sh: NAME must be letters, digits, - or _, got '$name'" >&2; exit 2; }
cd "$root"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
if [ "$rev" = WORKTREE ]; then
  tar -cf - src/main/native | tar -x -C "$tmp"
else
  git rev-parse --verify -q "$rev^{commit}" >/dev/null || { echo "pack-lib.sh: no such revision '$rev'" >&2; exit 2; }
  git archive "$rev" src/main/native | tar -x -C "$tmp"
fi
# a revision from before DS4J_GPU_LINEINFO wrote -lineinfo into its flags: take it out there too
sed -i 's/ -lineinfo / /' "$tmp/src/main/native/build.sh"
DS4J_GPU_ARCH="-gencode arch=compute_90a,code=sm_90a" DS4J_GPU_LINEINFO=0 bash "$tmp/src/main/native/build.sh" "$tmp/out" nvcc
mkdir -p .device
xz -T0 -9 -c "$tmp/out/libds4j_gpu.so" > ".device/lib-$name.so.xz.tmp"
mv ".device/lib-$name.so.xz.tmp" ".device/lib-$name.so.xz"
carried=$(du -cb .device/*.xz | tail -1 | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
printf '== .device/lib-%s.so.xz (%s): %.1f MiB; .device %.1f MiB + the tracked tree %.1f MiB = %.1f MiB (a call carries at most 64)\n' \
  "$name" "$rev" "$(echo "$(stat -c %s ".device/lib-$name.so.xz") / 1048576" | bc -l)" "$(echo "$carried / 1048576" | bc -l)" \
  "$(echo "$tree / 1048576" | bc -l)" "$(echo "($carried + $tree) / 1048576" | bc -l)"
