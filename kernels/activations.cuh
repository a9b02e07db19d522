// The gates of gated MLPs in f32, shared by gated_act.cu and the CUTLASS gated GEMM's
// epilogue (cutlass/gemm_gated.cuh), so the fused and the unfused path compute the same
// function. CPU twin: src/backend/cpu/gated_act.rs.
#pragma once

namespace hopscore {

// silu(g) = g / (1 + exp(−g)) with the accurate expf (Llama's SwiGLU).
struct Silu {
  __host__ __device__ float operator()(float g) const { return g / (1.0f + expf(-g)); }
};

// The erf GELU (ModernBERT's GeGLU, `hidden_activation` "gelu"): the expression of
// common.cuh's gelu_erf (gelu.cu), which this header does not include (the CUTLASS
// epilogue and the emulator read it alone).
struct Gelu {
  __host__ __device__ float operator()(float g) const {
    return 0.5f * g * (1.0f + erff(g * 0.70710678118654752f));
  }
};

// GPT-2's tanh GELU (T5 v1.1's gated-gelu), as gelu_new.cu.
struct GeluNew {
  __host__ __device__ float operator()(float g) const {
    const float c = 0.7978846f;  // √(2/π), as gelu_new.cu
    return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
  }
};

}  // namespace hopscore
