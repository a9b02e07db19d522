// wgmma_check: C[64][n] = A·B of small 16-bit matrices through the wgmma wrappers of
// common.cuh (wgmma.cuh: wgmma_desc, wgmma_ss, wgmma_rs, fence / commit / wait), in
// the two forms disentangled_attention_v5 uses, for the parity table of
// tests/gpu_parity.rs: a wrong descriptor, core-matrix layout or fragment layout, in
// the kernel's reading of the PTX ISA or in the emulator's model, fails there against
// a plain product, on the emulator and on a Hopper GPU alike. Launcher:
// src/backend/cuda/tensor_core_check.rs.
//
// hopscore-sass: sm_90a
//
// One warpgroup (128 threads). a is [64][k] row-major, k a multiple of 16 up to 64;
// n is 64 or 128. Mode bit kRegisters clear: b is [n][k] (C = A·Bᵀ), A and B from
// shared memory in core-matrix order, K-major (wgmma_ss). Set: b is [k][n] (C = A·B),
// A fragments from registers (read by each lane from global memory), B MN-major
// (wgmma_rs). Operands are staged by plain 16-byte stores, made visible to wgmma by
// fence_proxy_async and a barrier.
#include "common.cuh"
#include "params.cuh"

namespace {
#if defined(HOPSCORE_CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr unsigned kMaxK = 64;

// Rows [0, rows) × columns [0, cols) of row-major `src` into core-matrix order at `dst`
// (16-byte chunk e = (row group, column group, row % 8) at element 8e).
template <typename T> __device__ void stage(T* dst, const T* src, unsigned rows, unsigned cols) {
  for (unsigned e = threadIdx.x; e < rows * cols / 8; e += blockDim.x) {
    const unsigned r = e / cols * 8 + e % 8, c = 8 * (e / 8 % (cols / 8));
    *reinterpret_cast<uint4*>(dst + 8 * e) = *reinterpret_cast<const uint4*>(src + (size_t)r * cols + c);
  }
}

// Two consecutive 16-bit elements (the first in the low half) as one register.
template <typename T> __device__ __forceinline__ unsigned pair(const T* p) {
  return *reinterpret_cast<const unsigned*>(p);
}

template <typename T, int N> __device__ void check(const hopscore::TensorCoreCheckParams<T>& p) {
  constexpr unsigned kRegisters = 1;  // the mode bit
  HOPSCORE_DYNAMIC_SMEM(float, dyn);
  T* smem = reinterpret_cast<T*>(dyn);
  T* as = smem;               // [64][k]
  T* bs = smem + 64 * kMaxK;  // [n][k] or [k][n] (WGMMA_CHECK_SMEM in all)
  const unsigned k = p.k, lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const bool regs = p.mode & kRegisters;
  if (!regs) stage(as, p.a, 64, k);
  if (regs) {
    stage(bs, p.b, k, N);
  } else {
    stage(bs, p.b, N, k);
  }
  hopscore::fence_proxy_async();
  __syncthreads();
  float acc[N / 2];
  hopscore::wgmma_fence();
  for (unsigned ks = 0; ks < k / 16; ++ks) {
    if (regs) {
      // A rows 16w + g (+8), columns 16ks + 2t (+8): mma_16816's A fragment.
      const T* r0 = p.a + (size_t)(16 * w + g) * k + 16 * ks + 2 * t;
      const T* r1 = r0 + 8 * k;
      const unsigned a[4] = {pair(r0), pair(r1), pair(r0 + 8), pair(r1 + 8)};
      // MN-major B: next 8 rows (K) 16n bytes on, next 8 columns (N) 128.
      hopscore::wgmma_rs<T, N>(acc, a, hopscore::wgmma_desc(bs + 16 * N * ks, 16 * N, 128), ks > 0);
    } else {
      // K-major: next 8 columns (K) 128 bytes on, next 8 rows (M or N) 16k.
      hopscore::wgmma_ss<T, N>(acc, hopscore::wgmma_desc(as + 128 * ks, 128, 16 * k),
                               hopscore::wgmma_desc(bs + 128 * ks, 128, 16 * k), ks > 0);
    }
  }
  hopscore::wgmma_commit();
  hopscore::wgmma_wait<0>();
  for (unsigned nb = 0; nb < N / 8; ++nb)
    for (unsigned i = 0; i < 4; ++i)
      p.c[(16 * w + g + 8 * (i / 2)) * N + 8 * nb + 2 * t + (i & 1)] = acc[4 * nb + i];
}

#endif

template <typename T> __device__ __forceinline__ void run(const hopscore::TensorCoreCheckParams<T>& p) {
#if defined(HOPSCORE_CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (p.n == 64) {
    check<T, 64>(p);
  } else {
    check<T, 128>(p);
  }
#else
  __trap();  // sm_90a only: the launcher checks the device
#endif
}
}  // namespace

extern "C" __global__ void __launch_bounds__(hopscore::geometry::TENSOR_CORE_CHECK_THREADS)
    wgmma_check_bf16(const hopscore::TensorCoreCheckParams<__nv_bfloat16> p) {
  run(p);
}
HOPSCORE_ENTRY(wgmma_check_bf16);
extern "C" __global__ void __launch_bounds__(hopscore::geometry::TENSOR_CORE_CHECK_THREADS)
    wgmma_check_f16(const hopscore::TensorCoreCheckParams<__half> p) {
  run(p);
}
HOPSCORE_ENTRY(wgmma_check_f16);
