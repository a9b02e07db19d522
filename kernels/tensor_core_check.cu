// tensor_core_check: C = A·Bᵀ or A·B of small 16-bit matrices through the tensor-core
// wrappers of common.cuh (cp_async_16 / commit / wait, ldmatrix_x2 / _x4 / _trans,
// mma_16816), for the parity table of tests/gpu_parity.rs: a wrong fragment layout in
// a wrapper, or in the emulator's model of an instruction, fails there against a plain
// matrix product (and the same cases run on a GPU). Launcher:
// src/backend/cuda/tensor_core_check.rs.
//
// One block of 4 warps; warp w owns rows 16w..16w+15 of C [m][n] (f32, row-major).
// a is [m][k] row-major; b is [n][k] (C = A·Bᵀ) or, with kKN, [k][n] (C = A·B).
// m ≤ 64, n a multiple of 16 up to 64, k a multiple of 8 up to 64. The k columns are
// padded with zeros to kp = roundup(k, 32) in shared memory and staged in two halves.
//
// Mode bits:
//   kAsync     staging by cp_async_16 (zero-fill for the padding), one commit group per
//              half of kp, each waited for (cp_async_wait<1>, then <0>) before it is
//              used; otherwise 16-byte vector loads and stores
//   kLdmatrix  fragments by ldmatrix (A: _x4; B: _x2, or _x2_trans with kKN); otherwise
//              every lane reads its own elements (the layouts written in common.cuh)
//   kKN        b is [k][n]
//   kX4        B fragments of two 8-column blocks per ldmatrix_x4 / _x4_trans
#include "common.cuh"
#include "params.cuh"

namespace {
constexpr unsigned kAsync = 1, kLdmatrix = 2, kKN = 4, kX4 = 8;
constexpr unsigned kMax = 64;      // largest m, n and k
constexpr unsigned kLd = kMax + 8;  // smem row stride (elements; rows 16-byte aligned)

// Two consecutive 16-bit elements (the first in the low half) as one register.
template <typename T> __device__ __forceinline__ unsigned pair(const T* p) {
  return *reinterpret_cast<const unsigned*>(p);
}
template <typename T> __device__ __forceinline__ unsigned bits(T x) {
  return *reinterpret_cast<const unsigned short*>(&x);
}

// One 16-byte chunk: `ok` ? src[0..8) : zeros, into dst.
template <typename T> __device__ __forceinline__ void chunk(T* dst, const T* src, bool ok, bool async) {
  if (async)
    hopscore::cp_async_16(dst, src, ok ? 16 : 0);
  else
    *reinterpret_cast<uint4*>(dst) = ok ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
}

// Columns [c0, c1) (multiples of 8) of rows [0, rows) of `dst` (stride kLd) from `src`
// (rows × cols, row-major; columns ≥ cols are zero).
template <typename T>
__device__ void stage(T* dst, const T* src, unsigned rows, unsigned cols, unsigned c0, unsigned c1,
                      bool async) {
  const unsigned chunks = (c1 - c0) / 8;
  for (unsigned e = threadIdx.x; e < rows * chunks; e += blockDim.x) {
    const unsigned r = e / chunks, c = c0 + 8 * (e % chunks);
    const bool ok = c < cols;
    chunk(dst + r * kLd + c, src + (ok ? (size_t)r * cols + c : 0), ok, async);
  }
}

template <typename T>
__device__ void tensor_core_check(float* c, const T* a, const T* b, unsigned m, unsigned n, unsigned k,
                                  unsigned mode) {
  __shared__ __align__(16) T as[kMax * kLd];
  __shared__ __align__(16) T bs[kMax * kLd];
  const bool async = mode & kAsync, kn = mode & kKN;
  const unsigned kp = (k + 31) & ~31u, half = kp / 2;
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned g = lane / 4, t = lane % 4, r0 = 16 * warp;
  const bool rows_here = r0 < m;

  float acc[kMax / 8][4];
#pragma unroll
  for (unsigned nb = 0; nb < kMax / 8; ++nb)
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) acc[nb][i] = 0.0f;

  // Half h of kp: A columns, and B columns ([n][k]) or rows ([k][n]).
  auto stage_half = [&](unsigned h) {
    const unsigned c0 = h * half, c1 = c0 + half;
    stage(as, a, m, k, c0, c1, async);
    if (kn) {
      // Rows [c0, c1) of B: rows past k are zero.
      const unsigned chunks = n / 8;
      for (unsigned e = threadIdx.x; e < half * chunks; e += blockDim.x) {
        const unsigned r = c0 + e / chunks, col = 8 * (e % chunks);
        const bool ok = r < k;
        chunk(bs + r * kLd + col, b + (ok ? (size_t)r * n + col : 0), ok, async);
      }
    } else {
      stage(bs, b, n, k, c0, c1, async);
    }
    if (async) hopscore::cp_async_commit();
  };

  auto multiply_half = [&](unsigned h) {
    if (!rows_here) return;  // the whole warp
    for (unsigned ks = h * half; ks < (h + 1) * half; ks += 16) {
      unsigned fa[4];
      if (mode & kLdmatrix) {
        hopscore::ldmatrix_x4(fa, as + (r0 + lane % 16) * kLd + ks + 8 * (lane / 16));
      } else {
        fa[0] = pair(as + (r0 + g) * kLd + ks + 2 * t);
        fa[1] = pair(as + (r0 + g + 8) * kLd + ks + 2 * t);
        fa[2] = pair(as + (r0 + g) * kLd + ks + 2 * t + 8);
        fa[3] = pair(as + (r0 + g + 8) * kLd + ks + 2 * t + 8);
      }
      // Column blocks nb and nb + 1 (n is a multiple of 16).
#pragma unroll
      for (unsigned nb = 0; nb < kMax / 8; nb += 2) {
        if (nb >= n / 8) break;
        unsigned fb[2][2];
        if ((mode & kLdmatrix) && (mode & kX4)) {
          unsigned r[4];
          if (kn)
            hopscore::ldmatrix_x4_trans(r, bs + (ks + lane % 16) * kLd + 8 * nb + 8 * (lane / 16));
          else
            hopscore::ldmatrix_x4(r, bs + (8 * nb + lane % 8 + 8 * (lane / 16)) * kLd + ks + 8 * ((lane / 8) % 2));
          fb[0][0] = r[0], fb[0][1] = r[1], fb[1][0] = r[2], fb[1][1] = r[3];
        } else {
#pragma unroll
          for (unsigned s = 0; s < 2; ++s) {
            const unsigned cb = 8 * (nb + s);  // first column of the block
            if (!(mode & kLdmatrix)) {
#pragma unroll
              for (unsigned j = 0; j < 2; ++j) {
                const unsigned kk = ks + 2 * t + 8 * j;
                fb[s][j] = kn ? bits(bs[kk * kLd + cb + g]) | bits(bs[(kk + 1) * kLd + cb + g]) << 16
                              : pair(bs + (cb + g) * kLd + kk);
              }
            } else if (kn) {
              hopscore::ldmatrix_x2_trans(fb[s], bs + (ks + lane % 16) * kLd + cb);
            } else {
              hopscore::ldmatrix_x2(fb[s], bs + (cb + lane % 8) * kLd + ks + 8 * ((lane / 8) % 2));
            }
          }
        }
        hopscore::mma_16816<T>(acc[nb], fa, fb[0]);
        hopscore::mma_16816<T>(acc[nb + 1], fa, fb[1]);
      }
    }
  };

  stage_half(0);
  stage_half(1);
  if (async) hopscore::cp_async_wait<1>();  // the first half has landed
  __syncthreads();
  multiply_half(0);
  if (async) hopscore::cp_async_wait<0>();
  __syncthreads();
  multiply_half(1);

  if (!rows_here) return;
#pragma unroll
  for (unsigned nb = 0; nb < kMax / 8; ++nb)
#pragma unroll
    for (unsigned i = 0; i < 4; ++i) {
      const unsigned row = r0 + g + (i >= 2 ? 8 : 0), col = 8 * nb + 2 * t + (i & 1);
      if (nb < n / 8 && row < m) c[row * n + col] = acc[nb][i];
    }
}
}  // namespace

#define TENSOR_CORE_CHECK_ENTRY(SUFFIX, T)                                                  \
  extern "C" __global__ void tensor_core_check_##SUFFIX(hopscore::TensorCoreCheckParams<T> p) { \
    tensor_core_check<T>(p.c, p.a, p.b, p.m, p.n, p.k, p.mode);                             \
  }                                                                                        \
  HOPSCORE_ENTRY(tensor_core_check_##SUFFIX);

TENSOR_CORE_CHECK_ENTRY(bf16, __nv_bfloat16)
TENSOR_CORE_CHECK_ENTRY(f16, __half)
