// swiglu: the Llama MLP gate, out[t, i] = silu(x[t, i]) · x[t, inter + i] for rows
// [gate | up] of 2·inter columns (the fused gate/up projection) into [rows, inter].
// f32 math, silu(g) = g / (1 + exp(−g)) with the accurate expf. Grid-stride.
// CPU twin: src/backend/cpu/swiglu.rs.
#include "common.cuh"

template <typename T>
__device__ void swiglu(T* out, const T* x, unsigned rows, unsigned inter) {
  const size_t n = (size_t)rows * inter;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t r = i / inter, c = i % inter;
    const T* row = x + r * 2 * inter;
    const float g = hopscore::to_float(row[c]);
    const float u = hopscore::to_float(row[inter + c]);
    out[i] = hopscore::from_float<T>(g / (1.0f + expf(-g)) * u);
  }
}

#define SWIGLU_ENTRY(SUFFIX, T)                                                                  \
  extern "C" __global__ void swiglu_##SUFFIX(T* out, const T* x, unsigned rows,                \
                                             unsigned inter) {                                  \
    swiglu(out, x, rows, inter);                                                                \
  }                                                                                             \
  HOPSCORE_ENTRY(swiglu_##SUFFIX);

SWIGLU_ENTRY(f32, float)
SWIGLU_ENTRY(bf16, __nv_bfloat16)
SWIGLU_ENTRY(f16, __half)
