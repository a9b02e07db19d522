// gemm_add_norm: y = LayerNorm(x · wᵀ + bias + residual), bf16/f16, a post-LN
// transformer's output projection and the LayerNorm after it as one kernel, for rows of
// 1,024 columns (DeBERTa-v3-large, BERT-large) and 768 (the base models):
// gemm_add_norm_{1024,768}_{bf16,f16}. Launched as clusters of 8 CTAs along N (the
// launch's cluster attribute). The GEMM is CUTLASS's with an epilogue of ours
// (gemm_add_norm.cuh); gemm_host.cu builds its Params. CPU twin:
// `Backend::linear_add_norm`'s default (linear, then layer_norm with the residual); in
// the emulator, tools/cuda_emu/cutlass.cpp.
//
// hopscore-sass: sm_90a
//
// On any other image CUTLASS compiles the kernel body to a trap; the launcher only
// calls it on compute capability 9.0.
#include "gemm_add_norm.cuh"
#include "operands.h"

#define GEMM_ADD_NORM_ENTRY(WIDTH, SUFFIX, T)                                                                    \
  using gemm_add_norm_##WIDTH##_##SUFFIX##_op = hopscore_cutlass::AddNorm<T, WIDTH>;                        \
  extern "C" __global__ void __launch_bounds__(gemm_add_norm_##WIDTH##_##SUFFIX##_op::Kernel::MaxThreadsPerBlock,  \
                                               gemm_add_norm_##WIDTH##_##SUFFIX##_op::Kernel::MinBlocksPerMultiprocessor) \
      gemm_add_norm_##WIDTH##_##SUFFIX(const HopscoreGemmOperands,                                                \
                                       const __grid_constant__ gemm_add_norm_##WIDTH##_##SUFFIX##_op::Kernel::Params params) { \
    extern __shared__ char smem[];                                                                                \
    gemm_add_norm_##WIDTH##_##SUFFIX##_op::init(smem);                                                            \
    gemm_add_norm_##WIDTH##_##SUFFIX##_op::Kernel op;                                                             \
    op(params, smem);                                                                                             \
  }

GEMM_ADD_NORM_ENTRY(1024, bf16, cutlass::bfloat16_t)
GEMM_ADD_NORM_ENTRY(1024, f16, cutlass::half_t)
GEMM_ADD_NORM_ENTRY(768, bf16, cutlass::bfloat16_t)
GEMM_ADD_NORM_ENTRY(768, f16, cutlass::half_t)
