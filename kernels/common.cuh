// Shared device helpers for hopscore kernels. Only headers share code: each
// kernels/<op>.cu compiles to its own PTX module.
//
// Conventions (so that tools/cuda_emu can also compile every kernel as C++ and run it
// on the CPU behind a fake libcuda; see tools/cuda_emu/README.md):
// - every `extern "C" __global__` entry is followed by `HOPSCORE_ENTRY(name);`
// - dynamic shared memory is declared with `HOPSCORE_DYNAMIC_SMEM(type, name);`
// - warp collectives use the `*_sync` intrinsics with a full mask, in warps that are
//   complete (block sizes are multiples of 32); tensor cores only through the
//   mma.sync / ldmatrix / cp.async wrappers below (inline PTX here, the emulator's
//   model of each instruction under HOPSCORE_CUDA_EMU; nvcuda::wmma is not modelled)
// - a kernel with more than six arguments takes one parameter struct of params.cuh by
//   value (mirrored in src/backend/cuda/params.rs)
#pragma once
#ifndef HOPSCORE_CUDA_EMU
#include <cuda_bf16.h>
#include <cuda_fp16.h>
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


// ---------------------------------------------------------------- mma.sync, ldmatrix, cp.async
// Thin wrappers over the PTX instructions (sm_80+). Fragments are arrays of 32-bit
// registers holding two 16-bit elements each (lower column / row in the low half), in
// the PTX ISA's layouts ("Warp-level Matrix Fragments for mma.m16n8k16 with floating
// point type"); with g = lane / 4, t = lane % 4:
//   A (16×16, row-major): a[0] = A[g][2t..], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..],
//     a[3] = A[g+8][2t+8..];
//   B (16×8, k × n):      b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g];
//   C (16×8, f32):        c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1].
// Under the emulator each wrapper is a warp collective (tools/cuda_emu/emu.h), so every
// lane of the warp must call it, as on a GPU (`.sync.aligned`).

// acc += A·B on tensor cores (mma.sync.aligned.m16n8k16.row.col, f32 accumulators); T
// is __nv_bfloat16 or __half.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&acc)[4], const unsigned (&a)[4], const unsigned (&b)[2]);
#ifdef HOPSCORE_CUDA_EMU
template <typename T>
__device__ __forceinline__ void mma_16816(float (&acc)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  hopscore_emu::mma_m16n8k16<T>(acc, a, b);
}
#else
#define HOPSCORE_MMA_16816(T, PTX_TYPE)                                                              \
  template <>                                                                                       \
  __device__ __forceinline__ void mma_16816<T>(float (&acc)[4], const unsigned (&a)[4],             \
                                               const unsigned (&b)[2]) {                            \
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX_TYPE "." PTX_TYPE ".f32 "             \
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"                   \
                 : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])                           \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));              \
  }
HOPSCORE_MMA_16816(__nv_bfloat16, "bf16")
HOPSCORE_MMA_16816(__half, "f16")
#undef HOPSCORE_MMA_16816
#endif

// ldmatrix.sync.aligned.m8n8.x{2,4}[.trans].shared.b16 (PTX ISA, "Warp-level matrix load
// instruction: ldmatrix"): lanes 8m..8m+7 pass the (16-byte aligned, shared memory)
// addresses of rows 0..7 of 8×8 matrix m; r[m] receives row lane / 4, elements
// 2(lane % 4) and 2(lane % 4) + 1 of it, or with .trans column lane / 4, rows 2(lane % 4)
// and 2(lane % 4) + 1. With row-major tiles: `ldmatrix_x4` at &A[lane % 16][8 (lane /
// 16)] gives an A fragment; `ldmatrix_x2` at &Bt[lane % 8][8 ((lane / 8) % 2)] of a
// [n][k] tile gives a B fragment; `ldmatrix_x2_trans` at &B[lane % 16][0] of a [k][n]
// tile gives a B fragment.
#ifdef HOPSCORE_CUDA_EMU
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* row) {
  hopscore_emu::ldmatrix<2, false>(r, row);
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
  hopscore_emu::ldmatrix<4, false>(r, row);
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned (&r)[2], const void* row) {
  hopscore_emu::ldmatrix<2, true>(r, row);
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
  hopscore_emu::ldmatrix<4, true>(r, row);
}
#else
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(row)));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(row)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smem_addr(row)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(row)));
}
#endif

// cp.async.cg.shared.global of 16 bytes (PTX ISA, "Data Movement and Conversion
// Instructions: cp.async"): the first `src_bytes` (0 or 16) of `src` to `dst`, the rest
// zero-filled, asynchronously; both addresses 16-byte aligned, `src` a valid global
// address even when `src_bytes` is 0. The copies issued since the last commit form a
// group (`cp_async_commit`); `cp_async_wait<N>` returns once at most the N most recent
// groups are still in flight (then a barrier makes the data visible to other threads).
#ifdef HOPSCORE_CUDA_EMU
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, unsigned src_bytes = 16) {
  hopscore_emu::async_copy_16(dst, src, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { hopscore_emu::async_commit(); }
template <int N> __device__ __forceinline__ void cp_async_wait() { hopscore_emu::async_wait(N); }
#else
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, unsigned src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
               :: "r"(smem_addr(dst)), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
#endif

// 2^x by the MUFU approximation (ex2.approx.ftz: relative error ≤ 2^-22, denormal
// results flushed to 0), without exp2f's denormal-range fix-up; exp2f on the emulator.
__device__ __forceinline__ float exp2_approx(float x) {
#ifdef HOPSCORE_CUDA_EMU
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

// The two 16-bit elements of a register as floats (x: the low half).
template <typename T> __device__ __forceinline__ float2 unpack2(unsigned v);
template <> __device__ __forceinline__ float2 unpack2<__nv_bfloat16>(unsigned v) {
  return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}
template <> __device__ __forceinline__ float2 unpack2<__half>(unsigned v) {
  return __half22float2(*reinterpret_cast<const __half2*>(&v));
}

// Two floats as one register of two 16-bit elements (x in the low half), as an A
// fragment from values in registers (e.g. the probabilities of attention).
template <typename T> __device__ __forceinline__ unsigned pack2(float x, float y);
template <> __device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float x, float y) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<const unsigned*>(&v);
}
template <> __device__ __forceinline__ unsigned pack2<__half>(float x, float y) {
  const __half2 v = __floats2half2_rn(x, y);
  return *reinterpret_cast<const unsigned*>(&v);
}


// ---------------------------------------------------------------- 16-byte vectors
// `kVec<T>` elements of T fill 16 bytes (8 bf16/f16, 4 f32): one LDG.E.128 / STG.E.128.
// The address must be 16-byte aligned; `vec_aligned` tells whether a pointer is.
template <typename T> constexpr unsigned kVec = 16 / sizeof(T);

__device__ __forceinline__ bool vec_aligned(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

// The kVec<T> elements at p as floats, by one 16-byte load.
template <typename T> __device__ __forceinline__ void load_vec(const T* p, float (&v)[kVec<T>]) {
  const uint4 q = *reinterpret_cast<const uint4*>(p);
  if constexpr (sizeof(T) == 4) {
    v[0] = __uint_as_float(q.x), v[1] = __uint_as_float(q.y);
    v[2] = __uint_as_float(q.z), v[3] = __uint_as_float(q.w);
  } else {
    const unsigned w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = unpack2<T>(w[i]);
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
}

// Stores v (rounded to T as from_float does) at p, by one 16-byte store.
template <typename T> __device__ __forceinline__ void store_vec(T* p, const float (&v)[kVec<T>]) {
  uint4 q;
  if constexpr (sizeof(T) == 4) {
    q.x = __float_as_uint(v[0]), q.y = __float_as_uint(v[1]);
    q.z = __float_as_uint(v[2]), q.w = __float_as_uint(v[3]);
  } else {
    q.x = pack2<T>(v[0], v[1]), q.y = pack2<T>(v[2], v[3]);
    q.z = pack2<T>(v[4], v[5]), q.w = pack2<T>(v[6], v[7]);
  }
  *reinterpret_cast<uint4*>(p) = q;
}

// A row of `cols` elements held by one warp as up to NV 16-byte vectors per lane: lane l
// holds vectors l, l + 32, ..., so each load instruction of the warp reads 512
// contiguous bytes. Calls f(i, c) for each vector i < NV of this lane that lies in the
// row, c being its first column (unrolled: v[i] stays in registers).
template <typename T, unsigned NV, typename F>
__device__ __forceinline__ void for_row_vecs(unsigned cols, F f) {
#pragma unroll
  for (unsigned i = 0; i < NV; ++i) {
    const unsigned c = ((threadIdx.x & 31u) + 32u * i) * kVec<T>;
    if (c < cols) f(i, c);
  }
}

// x[i] = f(x[i], y[i]) for i < n (y null: f(x[i], 0)), in f32, rounded back to T. A
// grid-stride loop over 16-byte vectors when n is a multiple of kVec<T> and x, y are
// aligned, else element by element; 32-bit indexing (launchers keep n < 2^31).
template <typename T, typename F>
__device__ __forceinline__ void map_inplace(T* x, const T* y, unsigned n, F f) {
  constexpr unsigned V = kVec<T>;
  const unsigned stride = gridDim.x * blockDim.x;
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (n % V == 0 && vec_aligned(x) && (y == nullptr || vec_aligned(y))) {
    for (; i < n / V; i += stride) {
      float a[V], b[V] = {};
      load_vec(x + i * V, a);
      if (y != nullptr) load_vec(y + i * V, b);
#pragma unroll
      for (unsigned k = 0; k < V; ++k) a[k] = f(a[k], b[k]);
      store_vec(x + i * V, a);
    }
  } else {
    for (; i < n; i += stride) {
      x[i] = from_float<T>(f(to_float(x[i]), y != nullptr ? to_float(y[i]) : 0.0f));
    }
  }
}

}  // namespace hopscore
#include "wgmma.cuh"
#include "tma.cuh"
