// gated_act: the gate of a gated MLP, out[t, i] = act(x[t, i]) · x[t, inter + i] for rows
// [gate | up] of 2·inter columns (the fused gate/up projection) into [rows, inter]:
// gated_silu (Llama's SwiGLU, silu(g) = g / (1 + exp(−g)) with the accurate expf) and
// gated_gelu_new (T5 v1.1's gated-gelu: GPT-2's tanh GELU, as gelu_new.cu). f32 math. Grid-stride over
// 16-byte vectors of the output when inter is a multiple of 16 / sizeof(T) (else
// elements), 32-bit indexing (rows · 2·inter < 2^31, checked by the launcher).
// CPU twin: src/backend/cpu/gated_act.rs.
#include "common.cuh"

struct Silu {
  __device__ float operator()(float g) const { return g / (1.0f + expf(-g)); }
};
struct GeluNew {
  __device__ float operator()(float g) const {
    const float c = 0.7978846f;  // √(2/π), as gelu_new.cu
    return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
  }
};

template <typename T, typename Act>
__device__ void gated_act(T* out, const T* x, unsigned rows, unsigned inter, Act act) {
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
      for (unsigned k = 0; k < V; ++k) g[k] = act(g[k]) * u[k];
      hopscore::store_vec(out + e, g);
    }
  } else {
    for (; i < n; i += stride) {
      const unsigned r = i / inter, c = i % inter;
      const T* row = x + r * 2 * inter;
      out[i] = hopscore::from_float<T>(act(hopscore::to_float(row[c])) * hopscore::to_float(row[inter + c]));
    }
  }
}

#define GATED_ENTRY(NAME, ACT, SUFFIX, T)                                                        \
  extern "C" __global__ void NAME##_##SUFFIX(T* out, const T* x, unsigned rows, unsigned inter) { \
    gated_act(out, x, rows, inter, ACT());                                                       \
  }                                                                                             \
  HOPSCORE_ENTRY(NAME##_##SUFFIX);

#define GATED_ENTRIES(SUFFIX, T)                                                                 \
  GATED_ENTRY(gated_silu, Silu, SUFFIX, T)                                                       \
  GATED_ENTRY(gated_gelu_new, GeluNew, SUFFIX, T)

GATED_ENTRIES(f32, float)
GATED_ENTRIES(bf16, __nv_bfloat16)
GATED_ENTRIES(f16, __half)
