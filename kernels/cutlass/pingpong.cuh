// The GEMM every kernel of this folder is built on: A [m, k] · B [n, k]ᵀ (B row-major is
// CUTLASS's column-major k × n) on Hopper, CUTLASS 3's warp-specialised TMA + wgmma
// mainloop with the ping-pong schedule on a persistent grid: each consumer warpgroup
// owns its own 128 × 128 tile and the two take turns, so one's epilogue runs under the
// other's main loop. A 1 × 1 cluster unless the kernel asks for another (with more than
// one CTA along N, the cluster's CTAs share A's tile by multicast); as many stages as
// the shared memory the epilogue leaves. One tile shape and no split-K whatever the row count, so a row gets the same
// bits in any batch.
#pragma once
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

namespace hopscore_cutlass {

using TileShape = cute::Shape<cute::_128, cute::_128, cute::_64>;
using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;

// Elements of T in 16 bytes: TMA's alignment.
template <class T>
inline constexpr int kAlign = 16 / sizeof(T);

// The kernel of that GEMM with `Epilogue` (a CUTLASS collective epilogue); a kernel
// may ask for another cluster or a narrower tile.
template <class T, class Epilogue, class Cluster = ClusterShape, class Tile = TileShape>
using PingpongGemm = cutlass::gemm::kernel::GemmUniversal<
    cute::Shape<int, int, int, int>,
    typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, T, cutlass::layout::RowMajor, kAlign<T>, T,
        cutlass::layout::ColumnMajor, kAlign<T>, float, Tile, Cluster,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
        cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp,
    Epilogue>;

}  // namespace hopscore_cutlass
