// layer_norm: x <- LN(x + residual) row-wise with affine weight, bias; row-major
// [rows, cols], residual optional (nullptr); a two-pass mean/variance in f32.
// CPU twin: src/backend/cpu/layer_norm.rs. Two kernels:
// - layer_norm_rows<NV>_<dtype> (v1): one warp per row, NORM_ROWS rows per block, the
//   row held in registers as up to NV 16-byte vectors per lane (cols a multiple of
//   16 / sizeof(T), at most 32 * NV vectors, every pointer aligned: the launcher
//   checks); both sums are warp shuffles, so no shared memory and no block barrier;
//   every load of a lane is issued before its first sum.
// - layer_norm_<dtype> (v0, every other shape): one block per row; the row staged in
//   shared memory as f32; global memory by 16-byte vectors when cols and the pointers
//   allow (else element by element).
#include "common.cuh"
#include "geometry.cuh"

template <typename T, unsigned NV>
__device__ void layer_norm_rows(T* x, const T* residual, const T* weight, const T* bias, unsigned rows,
                                unsigned cols, float eps) {
  constexpr unsigned V = hopscore::kVec<T>;
  const unsigned r = blockIdx.x * hopscore::geometry::NORM_ROWS + (threadIdx.x >> 5);
  if (r >= rows) return;  // the whole warp: its row is past the end
  T* xr = x + (size_t)r * cols;
  const T* rr = residual != nullptr ? residual + (size_t)r * cols : nullptr;
  float v[NV][V];
  hopscore::for_row_vecs<T, NV>(cols, [&](unsigned i, unsigned c) { hopscore::load_vec(xr + c, v[i]); });
  if (rr != nullptr) {
    hopscore::for_row_vecs<T, NV>(cols, [&](unsigned i, unsigned c) {
      float q[V];
      hopscore::load_vec(rr + c, q);
#pragma unroll
      for (unsigned k = 0; k < V; ++k) v[i][k] += q[k];
    });
  }
  float sum = 0.0f;
  hopscore::for_row_vecs<T, NV>(cols, [&](unsigned i, unsigned) {
#pragma unroll
    for (unsigned k = 0; k < V; ++k) sum += v[i][k];
  });
  const float mean = hopscore::warp_sum(sum) / (float)cols;
  float sq = 0.0f;
  hopscore::for_row_vecs<T, NV>(cols, [&](unsigned i, unsigned) {
#pragma unroll
    for (unsigned k = 0; k < V; ++k) sq += (v[i][k] - mean) * (v[i][k] - mean);
  });
  const float inv = rsqrtf(hopscore::warp_sum(sq) / (float)cols + eps);
  hopscore::for_row_vecs<T, NV>(cols, [&](unsigned i, unsigned c) {
    float w[V], b[V];
    hopscore::load_vec(weight + c, w);
    hopscore::load_vec(bias + c, b);
#pragma unroll
    for (unsigned k = 0; k < V; ++k) v[i][k] = (v[i][k] - mean) * inv * w[k] + b[k];
    hopscore::store_vec(xr + c, v[i]);
  });
}

template <typename T>
__device__ void layer_norm(T* x, const T* residual, const T* weight, const T* bias, unsigned rows,
                           unsigned cols, float eps) {
  constexpr unsigned V = hopscore::kVec<T>;
  HOPSCORE_DYNAMIC_SMEM(float, row);  // cols floats
  __shared__ float scratch[32];
  const unsigned r = blockIdx.x;
  if (r >= rows) return;
  T* xr = x + (size_t)r * cols;
  const T* rr = residual != nullptr ? residual + (size_t)r * cols : nullptr;
  const bool vec = cols % V == 0 && hopscore::vec_aligned(x) && hopscore::vec_aligned(weight) &&
                   hopscore::vec_aligned(bias) && (residual == nullptr || hopscore::vec_aligned(residual));
  float sum = 0.0f;
  if (vec) {
    for (unsigned c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
      float v[V];
      hopscore::load_vec(xr + c, v);
      if (rr != nullptr) {
        float q[V];
        hopscore::load_vec(rr + c, q);
#pragma unroll
        for (unsigned k = 0; k < V; ++k) v[k] += q[k];
      }
#pragma unroll
      for (unsigned k = 0; k < V; k += 4) {
        *reinterpret_cast<float4*>(row + c + k) = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
        sum += v[k] + v[k + 1] + v[k + 2] + v[k + 3];
      }
    }
  } else {
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
      float v = hopscore::to_float(xr[c]);
      if (rr != nullptr) v += hopscore::to_float(rr[c]);
      row[c] = v;
      sum += v;
    }
  }
  const float mean = hopscore::block_sum(sum, scratch) / (float)cols;
  float sq = 0.0f;
  for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = row[c] - mean;
    sq += d * d;
  }
  const float var = hopscore::block_sum(sq, scratch) / (float)cols;
  const float inv = rsqrtf(var + eps);
  if (vec) {
    for (unsigned c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
      float w[V], b[V], y[V];
      hopscore::load_vec(weight + c, w);
      hopscore::load_vec(bias + c, b);
#pragma unroll
      for (unsigned k = 0; k < V; ++k) y[k] = (row[c + k] - mean) * inv * w[k] + b[k];
      hopscore::store_vec(xr + c, y);
    }
  } else {
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
      const float y = (row[c] - mean) * inv * hopscore::to_float(weight[c]) + hopscore::to_float(bias[c]);
      xr[c] = hopscore::from_float<T>(y);
    }
  }
}

#define LAYER_NORM_ENTRY(SUFFIX, T)                                                              \
  extern "C" __global__ void layer_norm_##SUFFIX(T* x, const T* residual, const T* weight,      \
                                                 const T* bias, unsigned rows, unsigned cols,   \
                                                 float eps) {                                   \
    layer_norm(x, residual, weight, bias, rows, cols, eps);                                     \
  }                                                                                             \
  HOPSCORE_ENTRY(layer_norm_##SUFFIX);

LAYER_NORM_ENTRY(f32, float)
LAYER_NORM_ENTRY(bf16, __nv_bfloat16)
LAYER_NORM_ENTRY(f16, __half)

#define LAYER_NORM_ROWS_ENTRY(NV, SUFFIX, T)                                                     \
  extern "C" __global__ void __launch_bounds__(hopscore::geometry::NORM_ROWS * 32)              \
      layer_norm_rows##NV##_##SUFFIX(T* x, const T* residual, const T* weight, const T* bias,   \
                                     unsigned rows, unsigned cols, float eps) {                 \
    layer_norm_rows<T, NV>(x, residual, weight, bias, rows, cols, eps);                         \
  }                                                                                             \
  HOPSCORE_ENTRY(layer_norm_rows##NV##_##SUFFIX);

#define LAYER_NORM_ROWS_ENTRIES(NV)                 \
  LAYER_NORM_ROWS_ENTRY(NV, f32, float)             \
  LAYER_NORM_ROWS_ENTRY(NV, bf16, __nv_bfloat16)    \
  LAYER_NORM_ROWS_ENTRY(NV, f16, __half)

LAYER_NORM_ROWS_ENTRIES(2)
LAYER_NORM_ROWS_ENTRIES(4)
LAYER_NORM_ROWS_ENTRIES(8)
