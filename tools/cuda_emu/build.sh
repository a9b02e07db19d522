#!/usr/bin/env bash
# Builds the hopscore CUDA CPU emulator (see tools/cuda_emu/README.md):
#   target/cuda-emu/libcuda.so   (+ libcuda.so.1)   fake driver + every kernels/*.cu as C++
#                                                   + CPU stand-ins for kernels/cutlass/ (cutlass.cpp)
#   target/cuda-emu/libcublas.so (+ libcublas.so.13) fake cuBLAS
#   target/cuda-emu/libcublasLt.so (+ libcublasLt.so.13) fake cuBLASLt (matmul subset)
# Run from anywhere; paths are relative to the repository root. Incremental: an object
# is rebuilt only when its source, emu.h or a kernels/*.cuh header is newer.
#
# Environment:
#   CUDA_EMU_OUT=dir         output directory (default: target/cuda-emu)
#   CUDA_EMU_EXTRA="a.cu .." extra kernel files to compile into libcuda.so (tests)
#   CXX                      C++ compiler (default g++; needs C++20 and _Float16)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
emu=tools/cuda_emu
out="${CUDA_EMU_OUT:-target/cuda-emu}"
cxx="${CXX:-g++}"
mkdir -p "$out/obj"

common=(-std=c++20 -O2 -g -fPIC -pthread -Wall -Wno-unused-function -Wno-unused-variable -Wno-unknown-pragmas -Wno-psabi)
# The CPU's own FMA and half-float conversions where it has them: fmaf and _Float16
# inline instead of calling libm/libgcc (each correctly rounded either way, so the
# results are the same bits). Never a contraction the source does not write.
common+=(-ffp-contract=off)
if grep -qw fma /proc/cpuinfo 2>/dev/null; then common+=(-mfma); fi
if grep -qw f16c /proc/cpuinfo 2>/dev/null; then common+=(-mf16c); fi
# Shared memory is function-static storage that other fibers write during a sync call:
# no interprocedural assumption that a call leaves such statics untouched.
kflags=(-x c++ -include "$emu/emu.h" -DHOPSCORE_CUDA_EMU -Ikernels -I"$emu" -fno-ipa-reference -fno-strict-aliasing -fstack-clash-protection)

newer() {  # newer OBJ DEP...: true if OBJ is missing or older than any DEP
  local obj="$1"; shift
  [[ -f "$obj" ]] || return 0
  local d
  for d in "$@"; do [[ "$d" -nt "$obj" ]] && return 0; done
  return 1
}

headers=("$emu/emu.h" "$emu/halfbits.h" "$emu/fatbin.h" kernels/cutlass/operands.h "$0")
for h in kernels/*.cuh; do [[ -e "$h" ]] && headers+=("$h"); done

objs=()
compile() {  # compile SRC OBJ FLAGS...
  local src="$1" obj="$2"; shift 2
  if newer "$obj" "$src" "${headers[@]}"; then
    echo "cuda_emu: $cxx $src" >&2
    "$cxx" "${common[@]}" "$@" -c "$src" -o "$obj.tmp"
    mv "$obj.tmp" "$obj"
  fi
  objs+=("$obj")
}

compile "$emu/driver.cpp" "$out/obj/driver.o" -I"$emu"
kernels=(kernels/*.cu "$emu/cutlass.cpp")
[[ -e "${kernels[0]}" ]] || kernels=("$emu/cutlass.cpp")
for extra in ${CUDA_EMU_EXTRA:-}; do kernels+=("$extra"); done
for k in "${kernels[@]}"; do
  name="$(basename "$k" .cu)"
  tag="$(printf '%s' "$k" | cksum | cut -d' ' -f1)"
  compile "$k" "$out/obj/k_${name}_${tag}.o" "${kflags[@]}"
done

link() {  # link SO SONAME OBJ...
  local so="$1" soname="$2"; shift 2
  if newer "$so" "$@"; then
    "$cxx" -shared -pthread -Wl,-soname,"$soname" -o "$so.tmp" "$@"
    mv "$so.tmp" "$so"
  fi
}
# Relink when an object is newer, or when the object list changed (a kernel dropped from
# kernels/ or CUDA_EMU_EXTRA must not linger).
list="$out/obj/libcuda.objs"
if newer "$out/libcuda.so" "${objs[@]}" || [[ "$(cat "$list" 2>/dev/null)" != "${objs[*]}" ]]; then
  echo "cuda_emu: link $out/libcuda.so" >&2
  "$cxx" -shared -pthread -Wl,-soname,libcuda.so.1 -o "$out/libcuda.so.tmp" "${objs[@]}"
  mv "$out/libcuda.so.tmp" "$out/libcuda.so"
  printf '%s' "${objs[*]}" >"$list"
fi
ln -sf libcuda.so "$out/libcuda.so.1"

objs=()
compile "$emu/cublas.cpp" "$out/obj/cublas.o" -O3
link "$out/libcublas.so" libcublas.so.13 "$out/obj/cublas.o"
ln -sf libcublas.so "$out/libcublas.so.13"

objs=()
compile "$emu/cublaslt.cpp" "$out/obj/cublaslt.o" -O3
link "$out/libcublasLt.so" libcublasLt.so.13 "$out/obj/cublaslt.o"
ln -sf libcublasLt.so "$out/libcublasLt.so.13"

echo "cuda_emu: built $out/libcuda.so ($(( ${#kernels[@]} )) kernel files), $out/libcublas.so, $out/libcublasLt.so" >&2
case "$out" in /*) abs="$out" ;; *) abs="$root/$out" ;; esac
echo "cuda_emu: use LD_LIBRARY_PATH=$abs cargo test --features cuda ..." >&2
