// mean_pool: out[s] = sum_t m_t x_t / max(sum_t m_t, 1) over the rows of sequence s
// (cu_seqlens), accumulated in f32. Grid (sequences, column chunks of blockDim.x).
// CPU twin: src/backend/cpu/mean_pool.rs.
#include "common.cuh"

template <typename T>
__device__ void mean_pool(T* out, const T* x, const unsigned* cu_seqlens, const float* mask,
                          unsigned seqs, unsigned cols) {
  const unsigned s = blockIdx.x;
  const unsigned c = blockIdx.y * blockDim.x + threadIdx.x;
  if (s >= seqs || c >= cols) return;
  float acc = 0.0f, weight = 0.0f;
  for (unsigned t = cu_seqlens[s]; t < cu_seqlens[s + 1]; ++t) {
    const float m = mask[t];
    weight += m;
    acc += m * hopscore::to_float(x[(size_t)t * cols + c]);
  }
  out[(size_t)s * cols + c] = hopscore::from_float<T>(acc / fmaxf(weight, 1.0f));
}

#define MEAN_POOL_ENTRY(SUFFIX, T)                                                               \
  extern "C" __global__ void mean_pool_##SUFFIX(T* out, const T* x, const unsigned* cu_seqlens, \
                                                const float* mask, unsigned seqs,               \
                                                unsigned cols) {                                \
    mean_pool(out, x, cu_seqlens, mask, seqs, cols);                                            \
  }                                                                                             \
  HOPSCORE_ENTRY(mean_pool_##SUFFIX);

MEAN_POOL_ENTRY(f32, float)
MEAN_POOL_ENTRY(bf16, __nv_bfloat16)
MEAN_POOL_ENTRY(f16, __half)
