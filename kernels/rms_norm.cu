// rms_norm: out = weight · x / sqrt(mean(x²) + eps) row-wise (HF LlamaRMSNorm), row-major
// [rows, cols], into a new tensor (the residual stream x is left as is). One block per
// row; the sum of squares is accumulated in f32 and reduced over the block.
// CPU twin: src/backend/cpu/rms_norm.rs.
#include "common.cuh"

template <typename T>
__device__ void rms_norm(T* out, const T* x, const T* weight, unsigned rows, unsigned cols,
                         float eps) {
  __shared__ float scratch[32];
  const unsigned r = blockIdx.x;
  if (r >= rows) return;
  const T* xr = x + (size_t)r * cols;
  T* orow = out + (size_t)r * cols;
  float ss = 0.0f;
  for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = hopscore::to_float(xr[c]);
    ss += v * v;
  }
  const float total = hopscore::block_sum(ss, scratch);
  // As the twin: 1 / sqrt(mean + eps), not the approximate rsqrtf.
  const float inv = 1.0f / sqrtf(total / (float)cols + eps);
  for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = hopscore::to_float(xr[c]);
    orow[c] = hopscore::from_float<T>(hopscore::to_float(weight[c]) * (v * inv));
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
