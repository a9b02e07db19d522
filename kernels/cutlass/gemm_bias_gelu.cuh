// D = gelu_erf(A · Bᵀ + bias) on Hopper: CUTLASS 3's warp-specialised TMA + wgmma GEMM
// with the bias and the erf GELU in its epilogue (cutlass::epilogue::thread::GELU is
// the erf form HF's `gelu` is; cuBLASLt's GELU epilogue is the tanh form). Ping-pong
// schedule on a persistent grid: each consumer warpgroup owns its own 128 × 128 tile
// and the two take turns, so one's epilogue (an erff per element, about a third of a
// tile's tensor time; kernels/NOTES.md) runs under the other's wgmma. One tile shape
// and no split-K whatever the row count, so a row gets the same bits in any batch.
#pragma once
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

namespace hopscore_cutlass {

template <class T>
struct BiasGelu {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  static constexpr int kAlign = 16 / sizeof(T);  // elements in 16 bytes: TMA's alignment
  // D = gelu(1 · acc + bias[col]), no C operand; computed in f32, rounded once.
  using Fusion = cutlass::epilogue::fusion::LinCombPerColBiasEltAct<cutlass::epilogue::thread::GELU, T,
                                                                     float, T, void, float>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlign, T,
      cutlass::layout::RowMajor, kAlign, cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
  // A [m, k] row-major; B [n, k] row-major is CUTLASS's column-major k × n.
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, cutlass::layout::RowMajor, kAlign, T,
      cutlass::layout::ColumnMajor, kAlign, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue>;
};

}  // namespace hopscore_cutlass
