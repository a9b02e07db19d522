// rms_norm: out = weight · x / sqrt(mean(x²) + eps) row-wise (HF LlamaRMSNorm), row-major
// [rows, cols], into a new tensor (the residual stream x is left as is). One block per
// row; the sum of squares is accumulated in f32 and reduced over the block. Global
// memory is read and written by 16-byte vectors when cols is a multiple of
// 16 / sizeof(T) and every pointer is aligned (else element by element).
// CPU twin: src/backend/cpu/rms_norm.rs.
#include "common.cuh"

template <typename T>
__device__ void rms_norm(T* out, const T* x, const T* weight, unsigned rows, unsigned cols,
                         float eps) {
  constexpr unsigned V = hopscore::kVec<T>;
  __shared__ float scratch[32];
  const unsigned r = blockIdx.x;
  if (r >= rows) return;
  const T* xr = x + (size_t)r * cols;
  T* orow = out + (size_t)r * cols;
  const bool vec = cols % V == 0 && hopscore::vec_aligned(x) && hopscore::vec_aligned(out) &&
                   hopscore::vec_aligned(weight);
  float ss = 0.0f;
  if (vec) {
    for (unsigned c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
      float v[V];
      hopscore::load_vec(xr + c, v);
#pragma unroll
      for (unsigned k = 0; k < V; ++k) ss += v[k] * v[k];
    }
  } else {
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = hopscore::to_float(xr[c]);
      ss += v * v;
    }
  }
  const float total = hopscore::block_sum(ss, scratch);
  // As the twin: 1 / sqrt(mean + eps), not the approximate rsqrtf.
  const float inv = 1.0f / sqrtf(total / (float)cols + eps);
  if (vec) {
    for (unsigned c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
      float v[V], w[V];
      hopscore::load_vec(xr + c, v);
      hopscore::load_vec(weight + c, w);
#pragma unroll
      for (unsigned k = 0; k < V; ++k) v[k] = w[k] * (v[k] * inv);
      hopscore::store_vec(orow + c, v);
    }
  } else {
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = hopscore::to_float(xr[c]);
      orow[c] = hopscore::from_float<T>(hopscore::to_float(weight[c]) * (v * inv));
    }
  }
}

#define RMS_NORM_ENTRY(SUFFIX, T)                                                                \
  extern "C" __global__ void rms_norm_##SUFFIX(T* out, const T* x, const T* weight,            \
                                               unsigned rows, unsigned cols, float eps) {      \
    rms_norm(out, x, weight, rows, cols, eps);                                                  \
  }                                                                                             \
  HOPSCORE_ENTRY(rms_norm_##SUFFIX);

RMS_NORM_ENTRY(f32, float)
RMS_NORM_ENTRY(bf16, __nv_bfloat16)
RMS_NORM_ENTRY(f16, __half)
