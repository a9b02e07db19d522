// layer_norm: x <- LN(x + residual) row-wise with affine weight, bias; row-major
// [rows, cols], residual optional (nullptr). One block per row; the row is staged in
// shared memory as f32 and normalised with a two-pass mean/variance. Global memory is
// read and written by 16-byte vectors when cols is a multiple of 16 / sizeof(T) and
// every pointer is aligned (else element by element).
// CPU twin: src/backend/cpu/layer_norm.rs.
#include "common.cuh"

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
