// D = LayerNorm(A · Bᵀ + bias + residual) on Hopper: a post-LN transformer's output
// projection (DeBERTa's and BERT's attention-out and FFN-down) and the LayerNorm after
// it in one kernel. The GEMM is pingpong.cuh's with a cluster of 8 CTAs along N and
// tiles of width / 8 columns (1,024: 128; 768: 96), so that a cluster's 8 tiles are one
// whole row of the output, and A's tile is multicast to all of them (8 divides A's 128
// tile rows; a cluster of 6 128-wide tiles for 768 would not). The persistent
// scheduler hands every CTA of a cluster the same M block at the same turn, so
// consumer warpgroup w of each CTA holds the same 128 rows at once; the row statistics
// then take two exchanges through distributed shared memory, one per pass of the CPU
// twin (the mean, then Σ (x − mean)², not Σ x² − (Σ x)² / n):
// - each thread sums its values of a row (a quarter of the tile's width), the 4 lanes
//   of a quad (which hold the tile's columns of that row) add theirs by shuffles;
// - the warpgroup sends its 128 row sums to slot [w][round][rank] of every CTA of the
//   cluster (st.async, which also counts the bytes on that CTA's mbarrier
//   [w][round]) and waits on its own barrier for 8 × 512 bytes;
// - every thread adds the 8 slots of its rows in rank order, so a row gets the
//   same bits in any batch.
// A slot is rewritten only after every peer has read it: the next write to
// [w][0] comes after the writer got this tile's round 1 from every peer, sent after
// that peer had summed round 0; the next write to [w][1] after the next tile's round
// 0, sent after the peer finished this tile. D is written once, from f32, by the
// thread that read the residual element.
#pragma once
#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/epilogue/collective/detail.hpp>

#include "direct_epilogue.cuh"
#include "operands.h"
#include "pingpong.cuh"

namespace hopscore_cutlass {

// Rows of a tile, rows a thread holds, CTAs of a cluster (along N).
constexpr int kTileRows = cute::size<0>(TileShape{});
constexpr int kRowsPerThread = 4;
constexpr int kRanks = HOPSCORE_NORM_CLUSTER;
// Consumer warpgroups of the ping-pong kernel: each has its own slots and barriers.
constexpr int kConsumers = 2;

// Columns of a tile for rows of `width`, and values of a row a thread holds.
template <int kWidth>
struct NormTile {
  static constexpr int kCols = kWidth / kRanks;
  static constexpr int kValuesPerRow = kCols / 4;
  static_assert(kWidth % (8 * kRanks) == 0 && kCols <= 128, "a wgmma width of at most 128 columns");
  using Shape = cute::Shape<cute::Int<kTileRows>, cute::Int<kCols>, cute::_64>;
};

// Accumulator (v0, v1, v2) of wgmma-row-block mm: row `i = 2·mm + v1` of the thread's
// four, value `j = 2·v2 + v0` of its values in that row. gemm_host.cu's
// `hopscore_gemm_norm_layout_errors` checks against CUTLASS's own partitioning that
// this is so: one row per (mm, v1), and a quad of lanes covering the row's columns.
CUTLASS_HOST_DEVICE auto norm_value(int i, int j) {
  return cute::make_coord(cute::make_coord(j % 2, i % 2, j / 2), i / 2, 0);
}

// mbarrier wait with acquire at cluster scope: the peers' st.async writes release
// there, and CUTLASS's ClusterBarrier::wait acquires only at CTA scope.
CUTLASS_DEVICE void wait_cluster(uint64_t const* barrier, uint32_t phase) {
  const uint32_t addr = cute::cast_smem_ptr_to_uint(barrier);
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT_%=;\n}" ::"r"(addr),
      "r"(phase)
      : "memory");
}

template <class T>
struct AddNormArguments {
  T* ptr_D = nullptr;           // [m, n] row-major
  const T* residual = nullptr;  // [m, n]
  const T* bias = nullptr;      // [n], the GEMM's
  const T* gamma = nullptr;     // [n], the LayerNorm's weight
  const T* beta = nullptr;      // [n], and bias
  float eps = 0.f;
};

// The collective epilogue (register-direct, direct_epilogue.cuh):
// LayerNorm(acc + bias + residual) of each row, over the cluster.
template <class T, int kWidth>
class AddNormEpilogue : public DirectEpilogue<T, AddNormArguments<T>> {
  using Base = DirectEpilogue<T, AddNormArguments<T>>;
  using Base::params_;
  static constexpr int kTileCols = NormTile<kWidth>::kCols;
  static constexpr int kValuesPerRow = NormTile<kWidth>::kValuesPerRow;

 public:
  using typename Base::Arguments;
  using Base::Base;

  struct SharedStorage {
    // Row sums of consumer w, round (0: Σ x, 1: Σ (x − mean)²), from CTA rank.
    float partial[kConsumers][2][kRanks][kTileRows];
    // The bytes of [w][round] arrived; one local arrival a phase.
    alignas(8) uint64_t exchanged[kConsumers][2];
  };
  using TensorStorage = SharedStorage;

  // Bytes a barrier waits for in a phase: a row sum of every tile row from every CTA.
  static constexpr uint32_t kExchangeBytes = kRanks * kTileRows * sizeof(float);

  // One cluster is one whole row, and pairs of outputs are 4-byte aligned.
  template <class ProblemShape>
  static bool can_implement(ProblemShape const& problem, Arguments const& args) {
    const auto aligned = [](const void* p) { return p != nullptr && reinterpret_cast<uintptr_t>(p) % 4 == 0; };
    return cute::get<1>(problem) == kWidth && aligned(args.ptr_D) && aligned(args.residual) &&
           aligned(args.bias) && aligned(args.gamma) && aligned(args.beta);
  }

  // The barriers, by one thread before the kernel's own cluster sync (which publishes
  // them to the peers with its pipelines' barriers).
  CUTLASS_DEVICE static void init(SharedStorage& s) {
    for (auto& consumer : s.exchanged)
      for (auto& barrier : consumer) cutlass::arch::ClusterTransactionBarrier::init(&barrier, 1);
    cutlass::arch::fence_barrier_init();
  }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, BlockShapeMNK blk_shape_mnk,
                                 BlockCoordMNKL blk_coord_mnkl, cute::Tensor<FrgEngine, FrgLayout> const& accumulators,
                                 TiledMma tiled_mma, ResidueMNK, int thread_idx, char* smem) {
    using namespace cute;
    static_assert(is_static<BlockShapeMNK>::value, "static tile shape");
    using Atom = typename TiledMma::Atom;
    static_assert(is_same_v<typename Atom::CLayout, SM90::GMMA::CLayout_64xN<kTileCols>>,
                  "the row walk assumes wgmma's 64 x N accumulator layout");
    static_assert(decltype(size(accumulators))::value == kRowsPerThread * kValuesPerRow,
                  "accumulators ((2, 2, N / 8), 2, 1)");
    auto& s = *reinterpret_cast<SharedStorage*>(smem);
    const int w = cutlass::canonical_warp_group_idx() - 1;

    const int m = get<0>(problem_shape_mnkl), n = get<1>(problem_shape_mnkl);
    const int row0 = get<0>(blk_coord_mnkl) * kTileRows, col0 = get<1>(blk_coord_mnkl) * kTileCols;
    auto thr_mma = tiled_mma.get_thread_slice(thread_idx);
    Tensor coords = thr_mma.partition_C(make_identity_tensor(take<0, 2>(blk_shape_mnk)));

    // x = acc + bias + residual, and each row's sum over the quad's 128 columns.
    float x[kRowsPerThread][kValuesPerRow];
    int tile_row[kRowsPerThread];
    float part[kRowsPerThread];
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRowsPerThread; ++i) {
      tile_row[i] = get<0>(coords(norm_value(i, 0)));
      const int row = row0 + tile_row[i];
      part[i] = 0.f;
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kValuesPerRow; j += 2) {
        const int col = col0 + get<1>(coords(norm_value(i, j)));
        const auto bias = pair(params_.bias + col);
        const auto res = row < m ? pair(params_.residual + int64_t(row) * n + col) : cutlass::AlignedArray<T, 2>{};
        CUTLASS_PRAGMA_UNROLL
        for (int v0 = 0; v0 < 2; ++v0) {
          x[i][j + v0] = accumulators(norm_value(i, j + v0)) + float(bias[v0]) + float(res[v0]);
          part[i] += x[i][j + v0];
        }
      }
    }
    float mean[kRowsPerThread];
    exchange(s, w, 0, thread_idx, tile_row, part, mean);

    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRowsPerThread; ++i) {
      mean[i] /= float(n);
      part[i] = 0.f;
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kValuesPerRow; ++j) {
        const float d = x[i][j] - mean[i];
        part[i] += d * d;
      }
    }
    float centred[kRowsPerThread];  // Σ (x − mean)² of each row
    exchange(s, w, 1, thread_idx, tile_row, part, centred);
    phase_ ^= 1;

    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = row0 + tile_row[i];
      if (row >= m) continue;
      const float inv = rsqrtf(centred[i] / float(n) + params_.eps);
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kValuesPerRow; j += 2) {
        const int col = col0 + get<1>(coords(norm_value(i, j)));
        const auto gamma = pair(params_.gamma + col), beta = pair(params_.beta + col);
        cutlass::AlignedArray<T, 2> y;
        CUTLASS_PRAGMA_UNROLL
        for (int v0 = 0; v0 < 2; ++v0)
          y[v0] = T((x[i][j + v0] - mean[i]) * inv * float(gamma[v0]) + float(beta[v0]));
        *reinterpret_cast<cutlass::AlignedArray<T, 2>*>(params_.ptr_D + int64_t(row) * n + col) = y;
      }
    }
  }

 private:
  CUTLASS_DEVICE static cutlass::AlignedArray<T, 2> pair(const T* p) {
    return *reinterpret_cast<const cutlass::AlignedArray<T, 2>*>(p);
  }

  // Completes each row's sum over the quad, sends it to slot [w][round][own rank] of
  // every CTA of the cluster, waits for all of theirs, and adds them in rank order.
  CUTLASS_DEVICE void exchange(SharedStorage& s, int w, int round, int thread_idx, const int (&tile_row)[kRowsPerThread],
                               float (&part)[kRowsPerThread], float (&total)[kRowsPerThread]) const {
    uint64_t* barrier = &s.exchanged[w][round];
    if (thread_idx == 0) cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(barrier, kExchangeBytes);
    const uint32_t rank = cute::block_rank_in_cluster();
    const uint32_t barrier_addr = cute::cast_smem_ptr_to_uint(barrier);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRowsPerThread; ++i) {
      part[i] += __shfl_xor_sync(0xffffffffu, part[i], 1);
      part[i] += __shfl_xor_sync(0xffffffffu, part[i], 2);
    }
    // Lane q of a quad sends the quad's rows to CTAs q, q + 4, …
    CUTLASS_PRAGMA_UNROLL
    for (int peer = thread_idx % 4; peer < kRanks; peer += 4) {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < kRowsPerThread; ++i) {
        const uint32_t slot = cute::cast_smem_ptr_to_uint(&s.partial[w][round][rank][tile_row[i]]);
        cute::store_shared_remote(__float_as_uint(part[i]), slot, barrier_addr, peer);
      }
    }
    wait_cluster(barrier, phase_);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kRowsPerThread; ++i) {
      total[i] = 0.f;
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRanks; ++r) total[i] += s.partial[w][round][r][tile_row[i]];
    }
  }

  // Parity of this warpgroup's barriers: flips once a tile.
  uint32_t phase_ = 0;
};

// The kernel for rows of `kWidth` columns: cluster 1 × 8, A multicast, tiles of
// kWidth / 8 columns.
template <class T, int kWidth>
struct AddNorm {
  using Cluster = cute::Shape<cute::_1, cute::Int<kRanks>, cute::_1>;
  using Epilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<AddNormEpilogue<T, kWidth>>;
  using Kernel = PingpongGemm<T, Epilogue, Cluster, typename NormTile<kWidth>::Shape>;

  // The epilogue's barriers in the kernel's shared memory, initialised before the
  // kernel's own setup.
  CUTLASS_DEVICE static void init(char* smem) {
    if (threadIdx.x == 0)
      AddNormEpilogue<T, kWidth>::init(reinterpret_cast<typename Kernel::SharedStorage*>(smem)->tensors.epilogue);
  }
};

}  // namespace hopscore_cutlass
