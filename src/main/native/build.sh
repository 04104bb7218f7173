#!/usr/bin/env bash
# Builds libds4j_gpu.so from src/main/native with nvcc (CUDA, through compat/hip_to_cuda.h) or hipcc (ROCm).
#
#   build.sh OUT_DIR [auto|nvcc|hipcc|none] [OBJ_DIR]
#
# auto picks nvcc when it is on the PATH (or at /usr/local/cuda/bin), else hipcc (PATH or /opt/rocm/bin); none skips.
# DS4J_GPU_LINEINFO=0 builds without -lineinfo (nvcc).
# Targets: DS4J_GPU_ARCH overrides them (nvcc default: sm_90a machine code, which H100 / H200 load and which has the
# warpgroup MMAs of src/tc_wgmma.h, + compute_90 PTX for later GPUs, without them; hipcc default: gfx1100 and gfx1151).
# A target list with sm_90a defines DS4J_WGMMA=1, which lets the host launch the wgmma kernels on compute capability 9.
# Objects are rebuilt only when their sources changed; the library is replaced atomically.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${1:?usage: build.sh OUT_DIR [auto|nvcc|hipcc|none] [OBJ_DIR]}"
which="${2:-auto}"
obj="${3:-$out/.obj}"
lib="$out/libds4j_gpu.so"

find_tool() { # name, fallback path
  if command -v "$1" >/dev/null 2>&1; then command -v "$1"; elif [ -x "$2" ]; then echo "$2"; fi
}
case "$which" in
  none) echo "ds4j native: skipped (ds4j.native=none)"; exit 0 ;;
  auto) cc="$(find_tool nvcc /usr/local/cuda/bin/nvcc)"; kind=nvcc
        if [ -z "$cc" ]; then cc="$(find_tool hipcc /opt/rocm/bin/hipcc)"; kind=hipcc; fi ;;
  nvcc) cc="$(find_tool nvcc /usr/local/cuda/bin/nvcc)"; kind=nvcc ;;
  hipcc) cc="$(find_tool hipcc /opt/rocm/bin/hipcc)"; kind=hipcc ;;
  *) echo "ds4j native: unknown compiler '$which' (expected auto, nvcc, hipcc or none)" >&2; exit 2 ;;
esac
if [ -z "$cc" ]; then
  echo "ds4j native: no $([ "$which" = auto ] && echo "nvcc or hipcc" || echo "$which") found; the GPU library is not built" >&2
  [ "$which" = auto ] && exit 0 || exit 1
fi

srcs=("$here"/src/*.cpp)
headers=("$here"/src/*.h "$here"/compat/*.h "$here"/include/ds4j/*.h)
mkdir -p "$out" "$obj"

if [ "$kind" = nvcc ]; then
  arch="${DS4J_GPU_ARCH:--gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90}"
  wgmma=()
  case "$arch" in *sm_90a*) wgmma=(-DDS4J_WGMMA=1) ;; esac
  # -cudart static: the library needs no libcudart.so at run time, and loads on machines without a driver
  # (the first runtime call then reports the missing driver instead of dlopen failing).
  # -lineinfo: Nsight Compute's source view; DS4J_GPU_LINEINFO=0 leaves it out (a smaller library, for carrying
  # several to the device: tools/device/pack-lib.sh)
  lineinfo=(-lineinfo)
  [ "${DS4J_GPU_LINEINFO:-1}" = 0 ] && lineinfo=()
  cflags=(-x cu -std=c++17 -O3 "${lineinfo[@]}" -Xcompiler -fPIC -Xcompiler -fvisibility=hidden -Xcompiler -Wall "${wgmma[@]}" $arch)
  lflags=(-shared -cudart static $arch)
else
  arch="${DS4J_GPU_ARCH:---offload-arch=gfx1100 --offload-arch=gfx1151}"
  cflags=(-std=c++17 -O3 -fPIC -fvisibility=hidden -Wall $arch)
  lflags=(-shared $arch)
fi
stamp="$obj/flags"
echo "$kind $cc ${cflags[*]} ${lflags[*]}" > "$stamp.new"
if ! cmp -s "$stamp.new" "$stamp"; then rm -f "$obj"/*.o; mv "$stamp.new" "$stamp"; else rm -f "$stamp.new"; fi

newest_header="$(ls -t "${headers[@]}" | head -1)"
pids=()
objs=()
for s in "${srcs[@]}"; do
  o="$obj/$(basename "${s%.cpp}").o"
  objs+=("$o")
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ "$newest_header" -nt "$o" ]; then
    echo "ds4j native: $kind $(basename "$s")"
    "$cc" "${cflags[@]}" -c "$s" -o "$o.tmp" && mv "$o.tmp" "$o" &
    pids+=($!)
  fi
done
for p in "${pids[@]}"; do wait "$p"; done

relink=0
[ -f "$lib" ] || relink=1
for o in "${objs[@]}"; do [ "$o" -nt "$lib" ] && relink=1; done
if [ "$relink" = 1 ]; then
  "$cc" "${lflags[@]}" -o "$lib.tmp" "${objs[@]}"
  mv "$lib.tmp" "$lib"
  echo "ds4j native: built $lib ($kind)"
fi
