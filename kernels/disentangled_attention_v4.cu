// disentangled_attention v4: v3's DeBERTa attention (disentangled_attention.cu, same
// semantics, same band table, same grid) with every product on Hopper's warpgroup MMA
// (wgmma, sm_90a). CPU twin: src/backend/cpu/disentangled_attention.rs.
//
// hopscore-sass: sm_90a
// (build.rs compiles this file to sm_90a SASS and compute_80 PTX only: the PTX and any
// non-sm_90a image hold entries whose body traps; the launcher runs v4 on compute
// capability 9.0 alone, where the driver loads the sm_90a SASS.)
//
// Why (kernels/NOTES.md, 2026-11-26): on an H200, v3 spends 42% of a DeBERTa-v3-large
// forward at L = 512 in this attention at ≈ 16% of the bf16 tensor peak. Its 4 warps
// each ldmatrix every B fragment (K, the PK and PQ band rows, V) for their own 16 query
// rows: ≈ 152 KB of shared-memory reads per 64 × 64 tile. With wgmma the warpgroup
// reads each operand once (≈ 72 KB per tile), and 16 instructions replace 576 mma.sync.
// Measured there, this first version is slower than v3 (0.66× at L = 512): its staging
// order splits L2 requests and the wgmma groups are waited for one by one (NOTES.md has
// the analysis and the next steps); v3 stays the default.
//
// A block is one warpgroup (4 warps, 128 threads) owning 64 query rows of a (sequence,
// head); it walks 64-key tiles as v3 does (K, V, slots and the band rows by
// double-buffered cp.async). All 16-bit tiles sit in shared memory in core-matrix
// order (8 rows × 16 bytes as 128 contiguous bytes: `stage_tile`), the no-swizzle
// layout wgmma reads through descriptors (kernels/wgmma.cuh). Per key tile:
//   S = Q·Kᵀ            4 × m64n64k16 (Q and K from shared memory)
//   C = Q·PKᵀ           4 × m64n128k16 over the diagonal's 128 band rows (c2p)
//   P2 = K·PQᵀ          4 × m64n128k16 (p2c; K as the A operand)
//   O += P·V            4 × m64nDk16, P from registers, V MN-major
// S, C, P2 and O are wgmma accumulators in registers, laid out as v3's mma.sync
// fragments, so v3's band gather, masking and online softmax (flash_v3.cuh) apply as
// they are. C and P2 reach the gather through an f32 scratch of 64 rows × 136: warp w
// stores its rows (query rows for C, key rows for P2) and reads C back itself; P2 rows
// are read by every warp after a barrier, as in v3 (which stored only a warp's 80-row
// window: wgmma computes all 128 band rows for the warpgroup, 1.6× v3's band products).
//
// Dynamic shared memory (bytes; d the padded head size 64 or 128):
//   scratch f32 [64][136] (with a band) | Q [64][d] | K, V [2 stages][2][64][d] |
//   PK, PQ [2][128][d] (with a band) | slots u32 [2 stages][128] (with a band)
// = 107 KB at d = 64 (two blocks per SM), 179 KB at d = 128: `disentangled_v4_smem`.
#include "flash_v3.cuh"
#include "params.cuh"

namespace {
namespace v4 {
#if defined(HOPSCORE_CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
using namespace hopscore::flash;
constexpr int kBandRows = int(hopscore::geometry::DA_V3_BAND_ROWS);  // staged table rows per tile diagonal
constexpr int kLdc = int(hopscore::geometry::DA_V4_SCRATCH_LD);    // scratch row stride (floats)

// A tile in core-matrix order: the 16-byte chunk e = (row group, column group, row % 8)
// at byte 16e, so core matrix (row group rg, column group cg) is the 128 bytes at
// (rg · D/8 + cg) · 128: K-major with LBO = 128 (next 8 columns) and SBO = 16·D (next 8
// rows); MN-major with the two swapped. Thread tid copies chunks e = tid + 128u
// (consecutive lanes fill one core matrix: no bank conflicts): for D = 64 or 128 these
// are row row0 + u·kStep, column col of every u (computed once per thread).
template <int D> struct Chunks {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStep = 8 * kThreads / D;  // rows between a thread's chunks
  static_assert(kThreads % D == 0 && (kThreads / 8) % (D / 8) == 0, "D is 64 or 128");
  int row0, col;
  __device__ __forceinline__ explicit Chunks(int tid) : row0(tid / D * 8 + tid % 8), col(8 * (tid / 8 % (D / 8))) {}
};

// Rows [0, Rows) of a tile ← rows `row_of(r)` of `src` (row stride `width`, r < 2^16),
// zero from row `limit` on and in columns d..D.
template <typename T, int D, int Rows, typename RowOf>
__device__ __forceinline__ void stage_tile(T* dst, const T* src, int limit, unsigned width, int d,
                                           const Chunks<D>& ch, RowOf row_of) {
  constexpr int per_thread = Rows * D / 8 / Chunks<D>::kThreads;
  static_assert(per_thread * Chunks<D>::kThreads * 8 == Rows * D, "whole chunks per thread");
  dst += 8 * threadIdx.x;
#pragma unroll
  for (int u = 0; u < per_thread; ++u) {
    const int r = ch.row0 + u * Chunks<D>::kStep;
    const bool ok = ch.col < d && r < limit;
    const T* s = src + (unsigned)row_of(r) * width + ch.col;
    hopscore::cp_async_16(dst + 8 * Chunks<D>::kThreads * u, ok ? s : src, ok ? 16 : 0);
  }
}

// Descriptors of a tile in core-matrix order: K-major (rows are M or N, columns K) and
// MN-major (rows are K, columns N), from element `at`.
template <int D> __device__ __forceinline__ unsigned long long k_major(const void* at) {
  return hopscore::wgmma_desc(at, 128, 16 * D);
}
template <int D> __device__ __forceinline__ unsigned long long mn_major(const void* at) {
  return hopscore::wgmma_desc(at, 16 * D, 128);
}

// The accumulator fragments as the flat register arrays wgmma takes.
template <int N> __device__ __forceinline__ float (&flat(float (&acc)[N / 8][4]))[N / 2] {
  return reinterpret_cast<float(&)[N / 2]>(acc);
}

template <typename T, int D>
__device__ void attention(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                          const T* __restrict__ pos_key, const T* __restrict__ pos_query,
                          const unsigned* __restrict__ band_table, const unsigned* __restrict__ cu_seqlens,
                          const float* __restrict__ mask, T* __restrict__ out, unsigned heads, unsigned head_size,
                          float scale) {
  HOPSCORE_DYNAMIC_SMEM(float, smem);
  const int d = (int)head_size;
  const unsigned width = heads * head_size;  // < 2^16 (the launcher checks it)
  const size_t col0 = (size_t)blockIdx.y * head_size;
  const int seq = (int)blockIdx.z;
  const int start = (int)cu_seqlens[seq];
  const int len = (int)cu_seqlens[seq + 1] - start;
  const int qt = (int)blockIdx.x, i0 = qt * kRows;
  if (i0 >= len) return;  // whole block: before any barrier or wgmma
  const int ntiles = (int)gridDim.x;  // key tiles of the longest sequence: diagonals 2·ntiles − 1

  const bool c2p = band_table != nullptr && pos_key != nullptr;
  const bool p2c = band_table != nullptr && pos_query != nullptr;
  const bool band = c2p || p2c;

  float* scratch = smem;                                              // [64][kLdc] with a band
  T* qs = reinterpret_cast<T*>(smem + (band ? kRows * kLdc : 0));     // [64][D]
  T* kv = qs + kRows * D;                                             // [stage][K, V][64][D]
  T* pk = kv + 4 * kKeys * D;                                         // [128][D]
  T* pq = pk + kBandRows * D;                                         // [128][D]
  unsigned* slots = reinterpret_cast<unsigned*>(pq + kBandRows * D);  // [stage][128]

  const int tid = (int)threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const HeadInputs<T> in(q, k, v, c2p ? pos_key : nullptr, p2c ? pos_query : nullptr, (size_t)start * width, col0);
  const T *qh = in.q, *kh = in.k, *vh = in.v, *pkh = in.pos_key, *pqh = in.pos_query;
  auto same = [](int r) { return r; };
  const Chunks<D> ch(tid);

  // Key tile kt (K, V and, with the band, its diagonal's slots) into stage kt % 2.
  auto stage_kv = [&](int kt) {
    T* dst = kv + (kt & 1) * 2 * kKeys * D;
    const size_t row0 = (size_t)kt * kKeys * width;
    stage_tile<T, D, kKeys>(dst, kh + row0, len - kt * kKeys, width, d, ch, same);
    stage_tile<T, D, kKeys>(dst + kKeys * D, vh + row0, len - kt * kKeys, width, d, ch, same);
    if (band && tid < kBandRows / 4) {
      const unsigned* sl = band_table + (size_t)(qt - kt + ntiles - 1) * 2 * kBandRows + kBandRows;
      hopscore::cp_async_16(slots + (kt & 1) * kBandRows + 4 * tid, sl + 4 * tid);
    }
  };
  // The band rows of key tile kt's diagonal (PK and PQ), single-buffered.
  auto stage_pos = [&](int kt) {
    const unsigned* rows = band_table + (size_t)(qt - kt + ntiles - 1) * 2 * kBandRows;
    auto row = [rows](int r) { return rows[r]; };
    if (c2p) stage_tile<T, D, kBandRows>(pk, pkh, kBandRows, width, d, ch, row);
    if (p2c) stage_tile<T, D, kBandRows>(pq, pqh, kBandRows, width, d, ch, row);
  };

  stage_tile<T, D, kRows>(qs, qh + (size_t)i0 * width, len - i0, width, d, ch, same);
  stage_kv(0);
  if (band) stage_pos(0);
  hopscore::cp_async_commit();

  const float sl2 = scale * 1.4426950408889634f;  // scale · log2(e)
  Rows16<T, D> rows;
  const int tiles = (len + kKeys - 1) / kKeys;
  // Descriptors, made once: a k-step of 16 columns is 256 bytes on (K-major), 16 rows
  // of V 32·D bytes (MN-major); a stage 2 · 64 · D elements.
  constexpr unsigned kStage = 2 * kKeys * D * sizeof(T);
  const unsigned long long q_desc = k_major<D>(qs), k_desc = k_major<D>(kv), v_desc = mn_major<D>(kv + kKeys * D);
  const unsigned long long pk_desc = c2p ? k_major<D>(pk) : 0, pq_desc = p2c ? k_major<D>(pq) : 0;
  using hopscore::wgmma_desc_add;
  for (int kt = 0; kt < tiles; ++kt) {
    const T* ks = kv + (kt & 1) * 2 * kKeys * D;
    const unsigned long long kd = wgmma_desc_add(k_desc, (kt & 1) * kStage);
    const unsigned long long vd = wgmma_desc_add(v_desc, (kt & 1) * kStage);
    const unsigned* slot = slots + (kt & 1) * kBandRows;
    hopscore::cp_async_wait<0>();    // tile kt's K, V, slots and band rows
    hopscore::fence_proxy_async();   // … visible to wgmma's reads
    __syncthreads();                 // … for every thread; every warp is done with tile kt − 1
    if (kt + 1 < tiles) stage_kv(kt + 1);
    hopscore::cp_async_commit();

    // S = Q·Kᵀ and C = Q·PKᵀ (rows 16w + g (+8) of this warp, as v3's fragments).
    float s[kNb][4];
    float c[kBandRows / 8][4];
    hopscore::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopscore::wgmma_ss<T, kKeys>(flat<kKeys>(s), wgmma_desc_add(q_desc, 256 * kk), wgmma_desc_add(kd, 256 * kk),
                                   kk > 0);
    if (c2p) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        hopscore::wgmma_ss<T, kBandRows>(flat<kBandRows>(c), wgmma_desc_add(q_desc, 256 * kk),
                                         wgmma_desc_add(pk_desc, 256 * kk), kk > 0);
    }
    hopscore::wgmma_commit();
    hopscore::wgmma_wait<0>();

    if (band) {
      const BandSlots sl(slot, warp, lane);
      float* mine = scratch + 16 * warp * kLdc;
      if (c2p) {  // this warp's query rows × all band slots, gathered by the warp
        store_scratch<kBandRows / 8, kLdc>(mine, c, lane);
        __syncwarp();
        sl.add_c2p<kLdc>(s, mine + g * kLdc);
        __syncwarp();  // the warp's scratch rows are free again
      }
      if (p2c) {  // P2 = K·PQᵀ: this warp's rows are keys 16w + g (+8), gathered by all
        hopscore::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          hopscore::wgmma_ss<T, kBandRows>(flat<kBandRows>(c), wgmma_desc_add(kd, 256 * kk),
                                           wgmma_desc_add(pq_desc, 256 * kk), kk > 0);
        hopscore::wgmma_commit();
        hopscore::wgmma_wait<0>();
        store_scratch<kBandRows / 8, kLdc>(mine, c, lane);
      }
      __syncthreads();  // P2 rows complete; the band rows are consumed (their wgmma waited for)
      if (kt + 1 < tiles) stage_pos(kt + 1);
      hopscore::cp_async_commit();
      if (p2c) sl.add_p2c<kLdc>(s, [&](int nb) { return scratch + (8 * nb + 2 * t) * kLdc; });
    }

    mask_keys(s, key_bits(mask + start, kt * kKeys, len, lane));
    unsigned pp[kNb][2];
    rows.probabilities(s, sl2, pp);
    // O += P·V: P of keys 16kk.. as the A fragment, V rows 16kk.. (MN-major).
    hopscore::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const unsigned pa[4] = {pp[2 * kk][0], pp[2 * kk][1], pp[2 * kk + 1][0], pp[2 * kk + 1][1]};
      hopscore::wgmma_rs<T, D>(flat<D>(rows.o), pa, wgmma_desc_add(vd, 32 * D * kk), true);
    }
    hopscore::wgmma_commit();
    hopscore::wgmma_wait<0>();
  }

  // Rows g and g + 8 of the warp; masked rows (and rows whose keys are all masked) are 0.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = i0 + 16 * warp + g + 8 * h;
    T* row = i < len ? out + (size_t)(start + i) * width + col0 : nullptr;
    rows.write(h, row, i < len && mask[start + i] != 0.0f, d, lane);
  }
}

#endif

// The entry's body: v4 on sm_90a (and in the emulator); any other image traps, as the
// launcher never runs it there.
template <typename T, int D> __device__ __forceinline__ void run(const hopscore::DisentangledAttentionParams<T>& p) {
#if defined(HOPSCORE_CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  attention<T, D>(p.q, p.k, p.v, p.pos_key, p.pos_query, p.rel_index, p.cu_seqlens, p.mask, p.out, p.heads,
                  p.head_size, p.scale);
#else
  __trap();
#endif
}
}  // namespace v4
}  // namespace

#define DISENTANGLED_ATTENTION_V4(D, SUFFIX, T)                                                     \
  extern "C" __global__ void __launch_bounds__(hopscore::geometry::ATTENTION_THREADS)                \
      disentangled_attention_v4_d##D##_##SUFFIX(const hopscore::DisentangledAttentionParams<T> p) { \
    v4::run<T, D>(p);                                                                               \
  }                                                                                                 \
  HOPSCORE_ENTRY(disentangled_attention_v4_d##D##_##SUFFIX);
DISENTANGLED_ATTENTION_V4(64, bf16, __nv_bfloat16)
DISENTANGLED_ATTENTION_V4(128, bf16, __nv_bfloat16)
DISENTANGLED_ATTENTION_V4(64, f16, __half)
DISENTANGLED_ATTENTION_V4(128, f16, __half)
