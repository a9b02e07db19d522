// D = gelu_erf(A · Bᵀ + bias) on Hopper: the ping-pong GEMM of pingpong.cuh with the
// bias and the erf GELU in CUTLASS's TMA epilogue (cutlass::epilogue::thread::GELU is
// the erf form HF's `gelu` is; cuBLASLt's GELU epilogue is the tanh form). The erff per
// element costs about a third of a tile's tensor time (kernels/NOTES.md) and runs under
// the other warpgroup's wgmma.
#pragma once
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>

#include "pingpong.cuh"

namespace hopscore_cutlass {

template <class T>
struct BiasGelu {
  // D = gelu(1 · acc + bias[col]), no C operand; computed in f32, rounded once.
  using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<cutlass::epilogue::thread::GELU, T,
                                                                     float, T, void, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlign<T>, T,
      cutlass::layout::RowMajor, kAlign<T>, cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
  using Kernel = PingpongGemm<T, Epilogue>;
};

}  // namespace hopscore_cutlass
