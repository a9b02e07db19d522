// swiglu: the Llama MLP gate, out[t, i] = silu(x[t, i]) · x[t, inter + i] for rows
// [gate | up] of 2·inter columns (the fused gate/up projection) into [rows, inter].
// f32 math, silu(g) = g / (1 + exp(−g)) with the accurate expf. Grid-stride over
// 16-byte vectors of the output when inter is a multiple of 16 / sizeof(T) (else
// elements), 32-bit indexing (rows · 2·inter < 2^31, checked by the launcher).
// CPU twin: src/backend/cpu/swiglu.rs.
#include "common.cuh"

__device__ __forceinline__ float swiglu1(float g, float u) { return g / (1.0f + expf(-g)) * u; }

template <typename T>
__device__ void swiglu(T* out, const T* x, unsigned rows, unsigned inter) {
  constexpr unsigned V = hopscore::kVec<T>;
  const unsigned n = rows * inter, stride = gridDim.x * blockDim.x;
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (inter % V == 0 && hopscore::vec_aligned(x) && hopscore::vec_aligned(out)) {
    for (; i < n / V; i += stride) {
      const unsigned e = i * V, r = e / inter, c = e % inter;
      const T* row = x + r * 2 * inter;
      float g[V], u[V];
      hopscore::load_vec(row + c, g);
      hopscore::load_vec(row + inter + c, u);
#pragma unroll
      for (unsigned k = 0; k < V; ++k) g[k] = swiglu1(g[k], u[k]);
      hopscore::store_vec(out + e, g);
    }
  } else {
    for (; i < n; i += stride) {
      const unsigned r = i / inter, c = i % inter;
      const T* row = x + r * 2 * inter;
      out[i] = hopscore::from_float<T>(swiglu1(hopscore::to_float(row[c]), hopscore::to_float(row[inter + c])));
    }
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
