// gelu_new: GPT-2's tanh-approximated GELU in place,
// x <- 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), computed in f32 with the accurate
// tanhf. Grid-stride over the n elements. CPU twin: src/backend/cpu/gelu_new.rs.
#include "common.cuh"

template <typename T>
__device__ void gelu_new(T* x, unsigned long long n) {
  const float c = 0.7978846f;  // √(2/π), as the twin's f32 constant
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const float v = hopscore::to_float(x[i]);
    x[i] = hopscore::from_float<T>(0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v))));
  }
}

#define GELU_NEW_ENTRY(SUFFIX, T)                                                                \
  extern "C" __global__ void gelu_new_##SUFFIX(T* x, unsigned long long n) { gelu_new(x, n); } \
  HOPSCORE_ENTRY(gelu_new_##SUFFIX);

GELU_NEW_ENTRY(f32, float)
GELU_NEW_ENTRY(bf16, __nv_bfloat16)
GELU_NEW_ENTRY(f16, __half)
