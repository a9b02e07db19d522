// gemm_bias_gelu: y = gelu_erf(x · wᵀ + bias), bf16/f16, the FFN up-projection of
// DeBERTa and BERT as one kernel (kernels/NOTES.md, "Fused erf GELU"). The GEMM is
// CUTLASS's (gemm_bias_gelu.cuh); this file only names its entry points, and
// gemm_host.cu builds their Params. CPU twin: `Backend::linear_gelu`'s
// default (linear, then gelu); in the emulator, tools/cuda_emu/cutlass.cpp.
//
// hopscore-sass: sm_90a
//
// On any other image CUTLASS compiles the kernel body to a trap; the launcher only
// calls it on compute capability 9.0.
#include "gemm_bias_gelu.cuh"
#include "operands.h"

#define GEMM_BIAS_GELU_ENTRY(SUFFIX, T)                                                         \
  using GemmBiasGelu_##SUFFIX = hopscore_cutlass::BiasGelu<T>::Kernel;                          \
  extern "C" __global__ void __launch_bounds__(GemmBiasGelu_##SUFFIX::MaxThreadsPerBlock,       \
                                               GemmBiasGelu_##SUFFIX::MinBlocksPerMultiprocessor) \
      gemm_bias_gelu_##SUFFIX(const HopscoreGemmOperands,                                       \
                              const __grid_constant__ GemmBiasGelu_##SUFFIX::Params params) {   \
    extern __shared__ char smem[];                                                              \
    GemmBiasGelu_##SUFFIX op;                                                                   \
    op(params, smem);                                                                           \
  }

GEMM_BIAS_GELU_ENTRY(bf16, cutlass::bfloat16_t)
GEMM_BIAS_GELU_ENTRY(f16, cutlass::half_t)
