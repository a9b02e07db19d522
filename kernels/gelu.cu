// gelu: x <- gelu_erf(x) in place over n elements (DeBERTa's MLP: its bias is the
// cuBLASLt epilogue of the GEMM before, so bias + GELU is the GEMM and this one pass).
// 16-byte vectors when n is a multiple of 16 / sizeof(T), 32-bit indexing (map_inplace).
// CPU twin: src/backend/cpu/gelu.rs.
#include "common.cuh"

#define GELU_ENTRY(SUFFIX, T)                                                                    \
  extern "C" __global__ void gelu_##SUFFIX(T* x, unsigned n) {                                  \
    hopscore::map_inplace(x, (const T*)nullptr, n, [](float v, float) { return hopscore::gelu_erf(v); }); \
  }                                                                                             \
  HOPSCORE_ENTRY(gelu_##SUFFIX);

GELU_ENTRY(f32, float)
GELU_ENTRY(bf16, __nv_bfloat16)
GELU_ENTRY(f16, __half)
