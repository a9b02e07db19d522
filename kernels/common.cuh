// Shared device helpers for hopscore kernels. Only headers share code: each
// kernels/<op>.cu compiles to its own PTX module.
//
// Conventions (so that tools/cuda_emu can also compile every kernel as C++ and run it
// on the CPU behind a fake libcuda; see tools/cuda_emu/README.md):
// - every `extern "C" __global__` entry is followed by `HOPSCORE_ENTRY(name);`
// - dynamic shared memory is declared with `HOPSCORE_DYNAMIC_SMEM(type, name);`
// - warp collectives use the `*_sync` intrinsics with a full mask, in warps that are
//   complete (block sizes are multiples of 32); tensor cores only through nvcuda::wmma.
#pragma once
#ifndef HOPSCORE_CUDA_EMU
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
// Entries need no registration on a real GPU: the driver finds them in the PTX.
#define HOPSCORE_ENTRY(name) static_assert(true, "")
#define HOPSCORE_DYNAMIC_SMEM(type, name) extern __shared__ __align__(16) type name[]
#endif

namespace hopscore {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <> __device__ __forceinline__ __half from_float<__half>(float x) { return __float2half(x); }

// Exact (erf) GELU, as `hidden_act = "gelu"` in HF DeBERTa.
__device__ __forceinline__ float gelu_erf(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

// Sum over the 32 lanes of a warp (every lane gets the total).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Maximum over the 32 lanes of a warp (every lane gets it).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets
// the total. `scratch` holds 32 floats of shared memory; the call synchronises.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(t);
}

#ifdef __CUDA_ARCH__
// One 16×16 tile of A·Bᵀ, for a whole warp: 16 rows of A and 16 rows of B (row-major
// 16-bit elements in shared memory, leading dimension `ld`, `k` a multiple of 16
// columns) multiplied on tensor cores with f32 accumulation and stored row-major at
// `s` (leading dimension `lds`; `layout` column-major stores the transpose).
template <typename T>
__device__ __forceinline__ void wmma_abt_tile(
    const T* a, const T* b, unsigned ld, unsigned k, float* s, unsigned lds,
    nvcuda::wmma::layout_t layout = nvcuda::wmma::mem_row_major) {
  using namespace nvcuda;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (unsigned kk = 0; kk < k; kk += 16) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
    wmma::load_matrix_sync(fa, a + kk, ld);
    wmma::load_matrix_sync(fb, b + kk, ld);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(s, acc, lds, layout);
}
#endif

}  // namespace hopscore
