// D = act(A · gateᵀ) · (A · upᵀ) on Hopper: a gated MLP's gate/up projection and its
// gate in one kernel (LEPUS's SwiGLU; T5 v1.1's gated-gelu). The fused weight B holds
// gate and up rows in alternating blocks of 64 (src/backend/mod.rs, `Gated`), so each
// 128-wide tile of A · Bᵀ has the gate of 64 outputs in its left half and their up in
// its right half, and Hopper's wgmma accumulator layout puts both in the same thread:
// value (v0, v1, v2) of a 64 × 128 atom is column 2·(lane % 4) + v0 + 8·v2, so columns
// c and c + 64 are values v2 and v2 + 8 of one thread. The epilogue below reads the
// pairs out of the registers, applies the gate in f32, rounds once and writes the
// half-width tile; no [gate | up] tensor exists in memory. The GEMM is pingpong.cuh's.
#pragma once
#include <cutlass/epilogue/collective/detail.hpp>

#include "../activations.cuh"
#include "direct_epilogue.cuh"
#include "operands.h"
#include "pingpong.cuh"

namespace hopscore_cutlass {

// Outputs per tile: half the tile's width (the gate half).
constexpr int kGatedBlock = HOPSCORE_GATED_BLOCK;

// Accumulator (v0, v1, v2) of wgmma-row-block mm holding a gate, and the one holding its
// up, 64 columns on (v2 + 8): the pairing the epilogue reads and gemm_host.cu's
// `hopscore_gemm_gated_layout_errors` checks against CUTLASS's own partitioning.
CUTLASS_HOST_DEVICE auto gate_value(int v0, int v1, int v2, int mm) {
  return cute::make_coord(cute::make_coord(v0, v1, v2), mm, 0);
}
CUTLASS_HOST_DEVICE auto up_value(int v0, int v1, int v2, int mm) {
  return cute::make_coord(cute::make_coord(v0, v1, v2 + 8), mm, 0);
}

// The collective epilogue: act(gate) · up of each tile, from the accumulators to global
// memory (two adjacent outputs per 4-byte store). Register-direct (direct_epilogue.cuh);
// it needs no shared memory, so the mainloop gets it all.
template <class T>
struct GatedArguments {
  T* ptr_D = nullptr;  // [m, n / 2] row-major
};

template <class T, class Act>
class GatedEpilogue : public DirectEpilogue<T, GatedArguments<T>> {
  using Base = DirectEpilogue<T, GatedArguments<T>>;
  using Base::params_;

 public:
  using typename Base::Arguments;
  struct SharedStorage {};
  using TensorStorage = SharedStorage;
  using Base::Base;

  // Whole tiles along N (every tile holds a gate block and its up block) and 4-byte
  // aligned pairs of outputs.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem, Arguments const& args) {
    const int n = cute::get<1>(problem);
    return n % (2 * kGatedBlock) == 0 && reinterpret_cast<uintptr_t>(args.ptr_D) % 4 == 0;
  }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char*) {
    using namespace cute;
    static_assert(is_static<BlockShapeMNK>::value, "static tile shape");
    static_assert(size<1>(BlockShapeMNK{}) == 2 * kGatedBlock, "a tile is one gate block and its up block");
    // One 64 × 128 wgmma atom along N, with the accumulator layout the pairing reads.
    using Atom = typename TiledMma::Atom;
    static_assert(is_same_v<typename Atom::CLayout, SM90::GMMA::CLayout_64xN<2 * kGatedBlock>>,
                  "the pairing assumes wgmma's 64 x 128 accumulator layout");
    static_assert(decltype(size<0, 2>(accumulators))::value == 16 && decltype(size<2>(accumulators))::value == 1,
                  "accumulators ((2, 2, 16), MMA_M, 1)");

    const int m = get<0>(problem_shape_mnkl), half_n = get<1>(problem_shape_mnkl) / 2;
    const int m_coord = get<0>(blk_coord_mnkl), n_coord = get<1>(blk_coord_mnkl);
    // Each accumulator's (row, column) within the tile.
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor coords = thr_mma.partition_C(make_identity_tensor(take<0, 2>(blk_shape_mnk)));
    const int row0 = m_coord * size<0>(blk_shape_mnk), col0 = n_coord * kGatedBlock;
    const Act act;
    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < size<1>(accumulators); ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int v1 = 0; v1 < 2; ++v1) {
        CUTLASS_PRAGMA_UNROLL
        for (int v2 = 0; v2 < 8; ++v2) {
          const auto gate = gate_value(0, v1, v2, mm);
          const int row = row0 + get<0>(coords(gate));
          if (row >= m) continue;
          cutlass::AlignedArray<T, 2> pair;
          CUTLASS_PRAGMA_UNROLL
          for (int v0 = 0; v0 < 2; ++v0) {
            const float g = accumulators(gate_value(v0, v1, v2, mm)), u = accumulators(up_value(v0, v1, v2, mm));
            pair[v0] = T(act(g) * u);
          }
          const int col = col0 + get<1>(coords(gate));
          *reinterpret_cast<cutlass::AlignedArray<T, 2>*>(params_.ptr_D + int64_t(row) * half_n + col) = pair;
        }
      }
    }
  }
};

template <class T, class Act>
struct Gated {
  static_assert(cute::size<1>(TileShape{}) == 2 * kGatedBlock, "a tile is one gate block and its up block");
  using Epilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<GatedEpilogue<T, Act>>;
  using Kernel = PingpongGemm<T, Epilogue>;
};

}  // namespace hopscore_cutlass
