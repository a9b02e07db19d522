// The operands of a CUTLASS GEMM call as plain numbers: the first kernel parameter of
// every entry in this folder (the kernel itself reads CUTLASS's Params, the second),
// what the host builder turns into those Params, and all the CPU emulator's stand-in
// reads (tools/cuda_emu/cutlass.cpp). Mirrored by `Operands` in src/backend/cuda/cutlass.rs.
#pragma once
#include <stdint.h>

struct HopscoreGemmOperands {
  uint64_t a;     // [m, k] row-major activations
  uint64_t b;     // [n, k] row-major weight (x · bᵀ)
  uint64_t bias;  // [n] (0: none)
  uint64_t d;     // [m, n] row-major output ([m, n / 2] for the gated kernels)
  // The norm kernels' residual [m, n] and LayerNorm weight and bias [n] (else 0).
  uint64_t residual, gamma, beta;
  int32_t m, n, k;
  int32_t sm_count;             // the persistent grid's bound: the device's multiprocessors
  int32_t max_active_clusters;  // the clustered kernels' bound (0: unknown, or 1 × 1 clusters)
  float eps;                    // the LayerNorm's
};

// The kernels the host builder knows (gemm_host.cu's `kind`); mirrored by `Kind` in
// src/backend/cuda/cutlass.rs.
enum {
  HOPSCORE_GEMM_BIAS_GELU = 0,       // gemm_bias_gelu: gelu_erf(a · bᵀ + bias)
  HOPSCORE_GEMM_GATED_SILU = 1,      // gemm_gated_silu: silu(a · gateᵀ) · (a · upᵀ), bias 0
  HOPSCORE_GEMM_GATED_GELU_NEW = 2,  // gemm_gated_gelu_new
  HOPSCORE_GEMM_ADD_NORM_1024 = 3,   // gemm_add_norm_1024: LN(a · bᵀ + bias + residual), n = 1,024
  HOPSCORE_GEMM_ADD_NORM_768 = 4,    // gemm_add_norm_768: the same, n = 768
};

// Outputs per tile of the gated kernels: the fused weight's rows alternate between 64
// gate rows and the 64 up rows they pair with (`Gated::BLOCK` in src/backend/mod.rs).
#define HOPSCORE_GATED_BLOCK 64

// CTAs along N in a cluster of the norm kernels (one row of the output); mirrored by
// `NORM_CLUSTER` in src/backend/cuda/cutlass.rs.
#define HOPSCORE_NORM_CLUSTER 8

// What the host builder hands back for the launch.
struct HopscoreGemmLaunch {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t cluster[3];    // CTAs a cluster (1, 1, 1: launch without the attribute)
  uint32_t smem;          // dynamic shared memory, bytes
  uint32_t params_bytes;  // sizeof the kernel's Params
};
