// The operands of a CUTLASS GEMM call as plain numbers: the first kernel parameter of
// every entry in this folder (the kernel itself reads CUTLASS's Params, the second),
// what the host builder turns into those Params, and all the CPU emulator's stand-in
// reads (tools/cuda_emu/cutlass.cpp). Mirrored by `Operands` in src/backend/cuda/cutlass.rs.
#pragma once
#include <stdint.h>

struct HopscoreGemmOperands {
  uint64_t a;     // [m, k] row-major activations
  uint64_t b;     // [n, k] row-major weight (x · bᵀ)
  uint64_t bias;  // [n]
  uint64_t d;     // [m, n] row-major output
  int32_t m, n, k;
  int32_t sm_count;  // the persistent grid's bound: the device's multiprocessors
};

// What the host builder hands back for the launch.
struct HopscoreGemmLaunch {
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t smem;          // dynamic shared memory, bytes
  uint32_t params_bytes;  // sizeof the kernel's Params
};
