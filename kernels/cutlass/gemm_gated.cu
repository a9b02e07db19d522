// gemm_gated: y = act(x · gateᵀ) · (x · upᵀ), bf16/f16, a gated MLP's gate/up
// projection and its gate as one kernel: gemm_gated_silu (Llama's SwiGLU) and
// gemm_gated_gelu_new (T5 v1.1's gated-gelu). The GEMM is CUTLASS's with an epilogue
// of ours (gemm_gated.cuh); gemm_host.cu builds its Params. CPU twin:
// `Backend::linear_gated`'s default (linear, then gated_act); in the emulator,
// tools/cuda_emu/cutlass.cpp.
//
// hopscore-sass: sm_90a
//
// On any other image CUTLASS compiles the kernel body to a trap; the launcher only
// calls it on compute capability 9.0.
#include "gemm_gated.cuh"
#include "operands.h"

#define GEMM_GATED_ENTRY(NAME, ACT, SUFFIX, T)                                                          \
  using NAME##_##SUFFIX##_kernel = hopscore_cutlass::Gated<T, ACT>::Kernel;                              \
  extern "C" __global__ void __launch_bounds__(NAME##_##SUFFIX##_kernel::MaxThreadsPerBlock,              \
                                               NAME##_##SUFFIX##_kernel::MinBlocksPerMultiprocessor)      \
      NAME##_##SUFFIX(const HopscoreGemmOperands, const __grid_constant__ NAME##_##SUFFIX##_kernel::Params params) { \
    extern __shared__ char smem[];                                                                        \
    NAME##_##SUFFIX##_kernel op;                                                                          \
    op(params, smem);                                                                                     \
  }

GEMM_GATED_ENTRY(gemm_gated_silu, hopscore::Silu, bf16, cutlass::bfloat16_t)
GEMM_GATED_ENTRY(gemm_gated_silu, hopscore::Silu, f16, cutlass::half_t)
GEMM_GATED_ENTRY(gemm_gated_gelu_new, hopscore::GeluNew, bf16, cutlass::bfloat16_t)
GEMM_GATED_ENTRY(gemm_gated_gelu_new, hopscore::GeluNew, f16, cutlass::half_t)
