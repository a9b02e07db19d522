// gelu_new: GPT-2's tanh-approximated GELU in place,
// x <- 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), computed in f32 with the accurate
// tanhf. 16-byte vectors when n is a multiple of 16 / sizeof(T), 32-bit indexing
// (map_inplace). CPU twin: src/backend/cpu/gelu_new.rs.
#include "common.cuh"

__device__ __forceinline__ float gelu_new1(float v, float) {
  const float c = 0.7978846f;  // √(2/π), as the twin's f32 constant
  return 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
}

#define GELU_NEW_ENTRY(SUFFIX, T)                                                                \
  extern "C" __global__ void gelu_new_##SUFFIX(T* x, unsigned n) {                              \
    hopscore::map_inplace(x, (const T*)nullptr, n, gelu_new1);                                  \
  }                                                                                             \
  HOPSCORE_ENTRY(gelu_new_##SUFFIX);

GELU_NEW_ENTRY(f32, float)
GELU_NEW_ENTRY(bf16, __nv_bfloat16)
GELU_NEW_ENTRY(f16, __half)
