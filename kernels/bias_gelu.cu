// bias_gelu: y[r, c] = gelu_erf(x[r, c] + bias[c]) in place, row-major [rows, cols].
// CPU twin: src/backend/cpu/gelu.rs.
#include "common.cuh"

template <typename T>
__device__ void bias_gelu(T* x, const T* bias, unsigned rows, unsigned cols) {
  const size_t n = (size_t)rows * cols;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float v = hopscore::to_float(x[i]);
    if (bias != nullptr) v += hopscore::to_float(bias[i % cols]);
    x[i] = hopscore::from_float<T>(hopscore::gelu_erf(v));
  }
}

extern "C" __global__ void bias_gelu_f32(float* x, const float* bias, unsigned rows, unsigned cols) {
  bias_gelu(x, bias, rows, cols);
}
HOPSCORE_ENTRY(bias_gelu_f32);
extern "C" __global__ void bias_gelu_bf16(__nv_bfloat16* x, const __nv_bfloat16* bias, unsigned rows,
                                          unsigned cols) {
  bias_gelu(x, bias, rows, cols);
}
HOPSCORE_ENTRY(bias_gelu_bf16);
extern "C" __global__ void bias_gelu_f16(__half* x, const __half* bias, unsigned rows, unsigned cols) {
  bias_gelu(x, bias, rows, cols);
}
HOPSCORE_ENTRY(bias_gelu_f16);
