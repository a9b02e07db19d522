// gated_act: the gate of a gated MLP, out[t, i] = act(gate[t, i]) · up[t, i] from rows of
// the fused gate/up projection (2·inter columns) into [rows, inter]. The columns come in
// blocks (src/backend/mod.rs, `Gated`): `block` gate columns, then the `block` up columns
// they pair with, and so on; block = inter is the plain [gate | up]. gated_silu (Llama's
// SwiGLU), gated_gelu_new (T5 v1.1's gated-gelu) and gated_gelu (ModernBERT's GeGLU, the
// erf GELU; no CUTLASS epilogue: the only path), activations.cuh, f32 math.
// Grid-stride over 16-byte vectors of the output when block is a multiple of
// 16 / sizeof(T) (else elements), 32-bit indexing (rows · 2·inter < 2^31, checked by the
// launcher). The unfused path of the CUTLASS gated GEMM (cutlass/gemm_gated.cuh).
// CPU twin: src/backend/cpu/gated_act.rs.
#include "activations.cuh"
#include "common.cuh"

// Column of output column c's gate in a row (its up is `block` further on).
__device__ __forceinline__ unsigned gate_column(unsigned c, unsigned block) {
  return c / block * 2 * block + c % block;
}

template <typename T, typename Act>
__device__ void gated_act(T* out, const T* x, unsigned rows, unsigned inter, unsigned block, Act act) {
  constexpr unsigned V = hopscore::kVec<T>;
  const unsigned n = rows * inter, stride = gridDim.x * blockDim.x;
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (block % V == 0 && hopscore::vec_aligned(x) && hopscore::vec_aligned(out)) {
    for (; i < n / V; i += stride) {
      const unsigned e = i * V, r = e / inter;
      const T* gate = x + r * 2 * inter + gate_column(e % inter, block);
      float g[V], u[V];
      hopscore::load_vec(gate, g);
      hopscore::load_vec(gate + block, u);
#pragma unroll
      for (unsigned k = 0; k < V; ++k) g[k] = act(g[k]) * u[k];
      hopscore::store_vec(out + e, g);
    }
  } else {
    for (; i < n; i += stride) {
      const T* gate = x + i / inter * 2 * inter + gate_column(i % inter, block);
      out[i] = hopscore::from_float<T>(act(hopscore::to_float(gate[0])) * hopscore::to_float(gate[block]));
    }
  }
}

#define GATED_ENTRY(NAME, ACT, SUFFIX, T)                                                   \
  extern "C" __global__ void NAME##_##SUFFIX(T* out, const T* x, unsigned rows, unsigned inter, \
                                             unsigned block) {                               \
    gated_act(out, x, rows, inter, block, ACT());                                            \
  }                                                                                          \
  HOPSCORE_ENTRY(NAME##_##SUFFIX);

#define GATED_ENTRIES(SUFFIX, T)                                                             \
  GATED_ENTRY(gated_silu, hopscore::Silu, SUFFIX, T)                                         \
  GATED_ENTRY(gated_gelu_new, hopscore::GeluNew, SUFFIX, T)                                 \
  GATED_ENTRY(gated_gelu, hopscore::Gelu, SUFFIX, T)

GATED_ENTRIES(f32, float)
GATED_ENTRIES(bf16, __nv_bfloat16)
GATED_ENTRIES(f16, __half)
