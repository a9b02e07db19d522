// rms_norm: out = weight · x / sqrt(mean(x²) + eps) row-wise (HF LlamaRMSNorm), row-major
// [rows, cols], into a new tensor (the residual stream x is left as is); the sum of
// squares in f32. CPU twin: src/backend/cpu/rms_norm.rs. Two kernels:
// - rms_norm_rows<NV>_<dtype> (v1): one warp per row, NORM_ROWS rows per block, the row
//   in registers as up to NV 16-byte vectors per lane (cols a multiple of
//   16 / sizeof(T), at most 32 * NV vectors, every pointer aligned: the launcher
//   checks); the sum is a warp shuffle, x is read once.
// - rms_norm_<dtype> (v0, every other shape): one block per row, the sum reduced over
//   the block, x read twice; 16-byte vectors when cols and the pointers allow.
#include "common.cuh"
#include "geometry.cuh"

template <typename T, unsigned NV>
__device__ void rms_norm_rows(T* out, const T* x, const T* weight, unsigned rows, unsigned cols,
                              float eps) {
  constexpr unsigned V = hopscore::kVec<T>;
  const unsigned r = blockIdx.x * hopscore::geometry::NORM_ROWS + (threadIdx.x >> 5);
  if (r >= rows) return;  // the whole warp: its row is past the end
  const T* xr = x + (size_t)r * cols;
  T* orow = out + (size_t)r * cols;
  float v[NV][V];
  hopscore::for_row_vecs<T, NV>(cols, [&](unsigned i, unsigned c) { hopscore::load_vec(xr + c, v[i]); });
  float ss = 0.0f;
  hopscore::for_row_vecs<T, NV>(cols, [&](unsigned i, unsigned) {
#pragma unroll
    for (unsigned k = 0; k < V; ++k) ss += v[i][k] * v[i][k];
  });
  // As the twin: 1 / sqrt(mean + eps), not the approximate rsqrtf.
  const float inv = 1.0f / sqrtf(hopscore::warp_sum(ss) / (float)cols + eps);
  hopscore::for_row_vecs<T, NV>(cols, [&](unsigned i, unsigned c) {
    float w[V];
    hopscore::load_vec(weight + c, w);
#pragma unroll
    for (unsigned k = 0; k < V; ++k) v[i][k] = w[k] * (v[i][k] * inv);
    hopscore::store_vec(orow + c, v[i]);
  });
}

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

#define RMS_NORM_ROWS_ENTRY(NV, SUFFIX, T)                                                       \
  extern "C" __global__ void __launch_bounds__(hopscore::geometry::NORM_ROWS * 32)              \
      rms_norm_rows##NV##_##SUFFIX(T* out, const T* x, const T* weight, unsigned rows,          \
                                   unsigned cols, float eps) {                                  \
    rms_norm_rows<T, NV>(out, x, weight, rows, cols, eps);                                      \
  }                                                                                             \
  HOPSCORE_ENTRY(rms_norm_rows##NV##_##SUFFIX);

#define RMS_NORM_ROWS_ENTRIES(NV)                 \
  RMS_NORM_ROWS_ENTRY(NV, f32, float)             \
  RMS_NORM_ROWS_ENTRY(NV, bf16, __nv_bfloat16)    \
  RMS_NORM_ROWS_ENTRY(NV, f16, __half)

RMS_NORM_ROWS_ENTRIES(2)
RMS_NORM_ROWS_ENTRIES(4)
RMS_NORM_ROWS_ENTRIES(8)
