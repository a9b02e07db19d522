// disentangled_attention v5: v3's DeBERTa attention (same semantics, band table and
// gathers) on wgmma, as a warp-specialised Hopper kernel: TMA loads with the 128-byte swizzle
// through an mbarrier ring, a producer warpgroup and two consumer warpgroups.
// Head size 64 (every DeBERTa), bf16/f16. CPU twin: src/backend/cpu/disentangled_attention.rs.
//
// hopscore-sass: sm_90a
//
// Why (kernels/NOTES.md, "v5"): v4 (deleted since) put every product on wgmma but lost to v3 (0.85× for
// the whole model) because 128 threads staged every tile by 16-byte cp.async into
// core-matrix order, splitting each 128-byte row into 8 scattered requests, and then
// waited for it. Here one thread asks the TMA unit for whole tiles: a 64-element row is
// exactly the 128-byte swizzle span, so a tile is one box and lands in the layout wgmma
// reads. DeBERTa's bucket map rises by at most 1 per offset, so the band rows of a tile
// diagonal are consecutive rows of the position tables: one 128-row box at the
// diagonal's first row (the launcher checks this and runs v3 otherwise).
//
// A block owns 128 query rows of a (sequence, head): consumer c (warpgroup 1 + c) the
// 64 rows of query tile 2·blockIdx.x + c. Warpgroup 0 gives its registers back
// (setmaxnreg) and one of its threads loads: the consumers' Q tiles once, then per key
// tile K and V (rings of 2 stages each, shared by both consumers), each consumer's PK
// band box of its own diagonal (2 stages) and its PQ box (1 stage), every buffer with a
// `full` and an `empty` mbarrier. A consumer per key tile: S = Q·Kᵀ and C =
// Q·PKᵀ (wgmma, A and B from shared memory; the band products as two 64-wide halves,
// the second skipped on a diagonal of at most 64 distinct rows), C gathered into S
// through its f32 scratch, P2 = K·PQᵀ stored there and gathered after a barrier of its
// warpgroup (bar.sync), the masks and online softmax of flash_v3.cuh, O += P·V with P
// from registers and V MN-major. v5.2: S and C of tile kt + 1 are issued before tile
// kt's softmax and P·V, and waited for at the start of tile kt + 1 (two commit groups in
// flight: FlashAttention-3's intra-warpgroup overlap), so the softmax runs under them and
// P·V under the next tile's C gather. The two consumers also take turns to issue S and C
// (ping-pong: bar.sync / bar.arrive), so one's gathers and softmax run under the other's
// tensor work. Rows of K and V past the sequence belong to the next one (or read as zero
// past the tensor); their scores are masked, so their probabilities are exactly 0.
#include "flash_v3.cuh"
#include "params.cuh"

namespace {
namespace v5 {
#if defined(HOPSCORE_CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
using namespace hopscore::flash;
namespace geo = hopscore::geometry;
constexpr int D = 64;
constexpr int kBandRows = int(geo::DA_V3_BAND_ROWS);
constexpr int kLdc = int(geo::DA_WG_SCRATCH_LD);
constexpr int kConsumers = int(geo::DA_V5_CONSUMERS);
constexpr unsigned kTile = geo::DA_V5_TILE_BYTES, kBand = geo::DA_V5_BAND_BYTES;
constexpr unsigned kC2p = 1, kP2c = 2;  // flags
using Bar = unsigned long long;

// Shared memory from the 1024-byte aligned base (geometry.cuh, DA_V5_*).
struct Layout {
  unsigned char* base;
  __device__ __forceinline__ unsigned char* q(int c) const { return base + c * kTile; }
  __device__ __forceinline__ unsigned char* k(int s) const { return base + (kConsumers + s) * kTile; }
  __device__ __forceinline__ unsigned char* v(int s) const { return base + (kConsumers + 2 + s) * kTile; }
  __device__ __forceinline__ unsigned char* pk(int c, int s) const {
    return base + (kConsumers + 4) * kTile + (2 * c + s) * kBand;
  }
  __device__ __forceinline__ unsigned char* pq(int c) const {
    return base + (kConsumers + 4) * kTile + (2 * kConsumers + c) * kBand;
  }
  __device__ __forceinline__ float* scratch(int c) const {
    return reinterpret_cast<float*>(base + (kConsumers + 4) * kTile + 3 * kConsumers * kBand) + c * kRows * kLdc;
  }
  __device__ __forceinline__ Bar* bars() const { return reinterpret_cast<Bar*>(base + geo::DA_V5_BARRIERS); }
  __device__ __forceinline__ Bar* q_full() const { return bars(); }
  __device__ __forceinline__ Bar* k_full(int s) const { return bars() + 1 + s; }
  __device__ __forceinline__ Bar* k_empty(int s) const { return bars() + 3 + s; }
  __device__ __forceinline__ Bar* v_full(int s) const { return bars() + 5 + s; }
  __device__ __forceinline__ Bar* v_empty(int s) const { return bars() + 7 + s; }
  __device__ __forceinline__ Bar* pk_full(int c, int s) const { return bars() + 9 + 2 * c + s; }
  __device__ __forceinline__ Bar* pk_empty(int c, int s) const { return bars() + 13 + 2 * c + s; }
  __device__ __forceinline__ Bar* pq_full(int c) const { return bars() + 17 + c; }
  __device__ __forceinline__ Bar* pq_empty(int c) const { return bars() + 19 + c; }
};
static_assert(geo::DA_V5_BARRIER_COUNT == 21, "Layout's barriers");

// The two stages of a ring and the parity of tile kt's use of its stage.
__device__ __forceinline__ int stage(int kt) { return kt % 2; }
__device__ __forceinline__ unsigned phase(int kt) { return (kt / 2) % 2; }

// K-major descriptor of a swizzled tile of 64-element rows (8-row atoms of 1 KB); a
// k-step of 16 columns is 32 bytes on.
__device__ __forceinline__ unsigned long long k_major(const void* tile) {
  return hopscore::wgmma_desc(tile, 16, 1024, 128);
}
// MN-major descriptor of such a tile read as B = [rows (K)][64 columns (N)]: 16 rows a
// k-step, 2 KB on.
__device__ __forceinline__ unsigned long long mn_major(const void* tile) {
  return hopscore::wgmma_desc(tile, kTile, 1024, 128);
}

template <int N> __device__ __forceinline__ float (&flat(float (&acc)[N / 8][4]))[N / 2] {
  return reinterpret_cast<float(&)[N / 2]>(acc);
}

// The band products of a diagonal: columns 0–63 (band rows 0–63) always, 64–127 only
// on a diagonal of more than 64 distinct rows (every diagonal past the linear buckets
// has at most 64, and the gathers never read a slot past them). Two 64-wide products,
// not one of the diagonal's width: with the width chosen in a branch, ptxas cannot keep
// the accumulators of the two paths apart and serialises every wgmma of the kernel
// (each waited for alone); the half-width accumulators of a 128-wide product are its
// first and last 32 registers, so `cb` is the same either way.
__device__ __forceinline__ float (&band_half_acc(float (&cb)[kBandRows / 8][4], int half))[kBandRows / 16][4] {
  return reinterpret_cast<float(&)[kBandRows / 16][4]>(cb[half * (kBandRows / 16)]);
}
template <typename T>
__device__ __forceinline__ void band_half(float (&cb)[kBandRows / 8][4], int half, unsigned long long a,
                                          unsigned long long b) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    hopscore::wgmma_ss<T, kBandRows / 2>(flat<kBandRows / 2>(band_half_acc(cb, half)),
                                         hopscore::wgmma_desc_add(a, 32 * kk),
                                         hopscore::wgmma_desc_add(b, 32 * kk + half * (kBandRows / 2) * 128), kk > 0);
}
template <typename T>
__device__ __forceinline__ void band_scores(bool narrow, float (&cb)[kBandRows / 8][4], unsigned long long a,
                                            unsigned long long b) {
  band_half<T>(cb, 0, a, b);
  if (!narrow) band_half<T>(cb, 1, a, b);
}
// A warp's band rows (query rows for C, key rows for P2) to its 16 scratch rows.
__device__ __forceinline__ void store_band(bool narrow, float* mine, float (&cb)[kBandRows / 8][4], int lane) {
  if (narrow) {
    store_scratch<kBandRows / 16, kLdc>(mine, band_half_acc(cb, 0), lane);
  } else {
    store_scratch<kBandRows / 8, kLdc>(mine, cb, lane);
  }
}

// The band-table entry (128 table rows, then 128 slots) of the diagonal of query tile
// qt and key tile kt, of the 2·band_tiles − 1 diagonals.
__device__ __forceinline__ const unsigned* diagonal(const unsigned* band_table, int qt, int kt, int band_tiles) {
  return band_table + (size_t)(qt - kt + band_tiles - 1) * 2 * kBandRows;
}

// Loads in the order the consumers free and need them: tile kt's K and PK (needed when
// tile kt − 1 issues its S and C), then V (P·V) and PQ (P2). K's stage is free again
// once S and P2 of its tile are done, PK's once C is, V's once P·V is (at tile kt + 1's
// P2), PQ's once P2 is: each load waits for a release about a tile before the load is
// needed.
template <typename T>
__device__ void produce(const hopscore::DisentangledV5Params<T>& p, const Layout& sm, int start, int qt0,
                        int active, int tiles) {
  const int col = (int)blockIdx.y * D;
  const bool c2p = p.flags & kC2p, p2c = p.flags & kP2c;
  hopscore::mbarrier_arrive_expect_tx(sm.q_full(), active * kTile);
  for (int c = 0; c < active; ++c) hopscore::tma_load_2d(sm.q(c), &p.q_map, col, start + (qt0 + c) * kRows, sm.q_full());
  const auto row0 = [&](int c, int kt) { return (int)diagonal(p.band_table, qt0 + c, kt, (int)p.band_tiles)[0]; };
  for (int kt = 0; kt < tiles; ++kt) {
    const int s = stage(kt);
    const unsigned free = phase(kt) ^ 1;  // a stage's first use passes
    hopscore::mbarrier_wait(sm.k_empty(s), free);
    hopscore::mbarrier_arrive_expect_tx(sm.k_full(s), kTile);
    hopscore::tma_load_2d(sm.k(s), &p.k_map, col, start + kt * kKeys, sm.k_full(s));
    for (int c = 0; c < active && c2p; ++c) {
      hopscore::mbarrier_wait(sm.pk_empty(c, s), free);
      hopscore::mbarrier_arrive_expect_tx(sm.pk_full(c, s), kBand);
      hopscore::tma_load_2d(sm.pk(c, s), &p.pk_map, col, row0(c, kt), sm.pk_full(c, s));
    }
    hopscore::mbarrier_wait(sm.v_empty(s), free);
    hopscore::mbarrier_arrive_expect_tx(sm.v_full(s), kTile);
    hopscore::tma_load_2d(sm.v(s), &p.v_map, col, start + kt * kKeys, sm.v_full(s));
    for (int c = 0; c < active && p2c; ++c) {
      hopscore::mbarrier_wait(sm.pq_empty(c), (kt + 1) % 2);
      hopscore::mbarrier_arrive_expect_tx(sm.pq_full(c), kBand);
      hopscore::tma_load_2d(sm.pq(c), &p.pq_map, col, row0(c, kt), sm.pq_full(c));
    }
  }
}

// One consumer over its query tile: tile kt + 1's S and C are issued before tile kt's
// masks and softmax run, tile kt's P·V after them, and tile kt + 1's scores are
// completed (C gathered into S, P2 = K·PQᵀ issued, waited for, stored and gathered after
// a barrier of the warpgroup) while that P·V runs (the loop at the end says how).
template <typename T>
__device__ void consume(const hopscore::DisentangledV5Params<T>& p, const Layout& sm, int c, int active, int start,
                        int len, int qt, int tiles) {
  const int tid = (int)threadIdx.x % 128, lane = tid % 32, warp = tid / 32, t = lane % 4, g = lane / 4;
  const bool c2p = p.flags & kC2p, p2c = p.flags & kP2c, band = c2p || p2c;
  const unsigned barrier = 1 + c;  // bar.sync id of this warpgroup
  // Ping-pong (both consumers at work): consumer c issues a tile's S and C once the
  // other has issued its own (barrier 3 + c: its 128 threads wait, the other's 128
  // arrive), so one's gathers and softmax run under the other's tensor work. Consumer 0
  // goes first; consumer 1 skips its last arrival, which no one waits for.
  const bool ping_pong = active == kConsumers;
  const unsigned my_turn = 3 + c, their_turn = 3 + (1 - c);
  if (ping_pong && c == 1) hopscore::named_barrier_arrive(their_turn, 256);
  float* scratch = sm.scratch(c);
  float* mine = scratch + 16 * warp * kLdc;  // this warp's 16 scratch rows
  const float sl2 = p.scale * 1.4426950408889634f;  // scale · log2(e)
  const unsigned long long q_desc = k_major(sm.q(c)), pq_desc = k_major(sm.pq(c));
  using hopscore::wgmma_desc_add;
  // The band-table entry of tile kt's diagonal, and whether it has at most 64 distinct
  // band rows (its last slot below 64): half-width band products.
  const auto diag = [&](int kt) { return diagonal(p.band_table, qt, kt, (int)p.band_tiles); };
  const auto narrow = [&](int kt) { return band && diag(kt)[2 * kBandRows - 1] < kBandRows / 2; };
  Rows16<T, D> rows;
  // The products of a tile issued ahead: declared afresh for each tile, so that the
  // compiler sees their registers free before the first product writes them (a
  // wgmma's accumulators are read-write operands) and after their last read.
  struct Ahead {
    float s[kNb][4];              // S
    float cb[kBandRows / 8][4];  // C, then P2
  };
  // S = Q·Kᵀ and the first half of C = Q·PKᵀ (band rows 0–63) of tile j (rows 16w + g
  // (+8) of this warp, as v3's fragments), one commit group, on this consumer's turn.
  const auto issue_s_and_c = [&](int j, Ahead& a) {
    if (ping_pong) hopscore::named_barrier_sync(my_turn, 256);
    hopscore::mbarrier_wait(sm.k_full(stage(j)), phase(j));
    const unsigned long long kd = k_major(sm.k(stage(j)));
    hopscore::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      hopscore::wgmma_ss<T, kKeys>(flat<kKeys>(a.s), wgmma_desc_add(q_desc, 32 * kk), wgmma_desc_add(kd, 32 * kk),
                                   kk > 0);
    if (c2p) {
      hopscore::mbarrier_wait(sm.pk_full(c, stage(j)), phase(j));
      band_half<T>(a.cb, 0, q_desc, k_major(sm.pk(c, stage(j))));
    }
    hopscore::wgmma_commit();
    if (ping_pong && (c == 0 || j + 1 < tiles)) hopscore::named_barrier_arrive(their_turn, 256);
  };
  // C's second half (band rows 64–127) of tile j on a wide diagonal, its own commit
  // group (empty on a narrow one). Issued after the softmax that runs under the first
  // group: until then its 32 accumulators are free for the softmax.
  const auto issue_c_rest = [&](int j, Ahead& a) {
    if (c2p && !narrow(j)) {
      hopscore::wgmma_fence();
      band_half<T>(a.cb, 1, q_desc, k_major(sm.pk(c, stage(j))));
    }
    hopscore::wgmma_commit();
  };

  // Once S and C of tile j are done (in `a`): sc ← S + c2p + p2c of tile j. Issues P2
  // and waits for every group in flight (P2, and tile j − 1's P·V).
  const auto complete_scores = [&](int j, Ahead& a, float (&sc)[kNb][4]) {
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[nb][i] = a.s[nb][i];
    const int s = stage(j);
    const bool nar = narrow(j);
    if (c2p) hopscore::mbarrier_arrive(sm.pk_empty(c, s));
    // Once P2 and tile j − 1's P·V are done: K of tile j, V of tile j − 1.
    const auto release_kv = [&] {
      hopscore::mbarrier_arrive(sm.k_empty(s));
      if (j > 0) hopscore::mbarrier_arrive(sm.v_empty(stage(j - 1)));
    };
    if (!band) {
      hopscore::wgmma_wait<0>();
      release_kv();
      return;
    }
    const BandSlots sl(diag(j) + kBandRows, warp, lane);
    if (c2p) {  // this warp's query rows × all band slots, gathered by the warp
      if (p2c) hopscore::named_barrier_sync(barrier, 128);  // every warp has gathered tile j − 1's P2
      store_band(nar, mine, a.cb, lane);
      __syncwarp();
      sl.add_c2p<kLdc>(sc, mine + g * kLdc);
      __syncwarp();  // the warp's scratch rows are free again
    }
    if (p2c) {  // P2 = K·PQᵀ: this warp's rows are keys 16w + g (+8), gathered by all
      hopscore::mbarrier_wait(sm.pq_full(c), j % 2);
      hopscore::wgmma_fence();
      band_scores<T>(nar, a.cb, k_major(sm.k(s)), pq_desc);
      hopscore::wgmma_commit();
    }
    hopscore::wgmma_wait<0>();
    release_kv();
    if (p2c) {
      hopscore::mbarrier_arrive(sm.pq_empty(c));
      if (!c2p) hopscore::named_barrier_sync(barrier, 128);  // every warp has gathered tile j − 1's P2
      store_band(nar, mine, a.cb, lane);
      hopscore::named_barrier_sync(barrier, 128);  // P2 rows complete
      sl.add_p2c<kLdc>(sc, [&](int nb) { return scratch + (8 * nb + 2 * t) * kLdc; });
    }
  };

  // Tile kt's masks and softmax: P rounded to T as wgmma A fragments.
  const auto softmax = [&](int kt, float (&sc)[kNb][4], unsigned (&pp)[kNb][2]) {
    mask_keys(sc, key_bits(p.mask + start, kt * kKeys, len, lane));
    rows.probabilities(sc, sl2, pp);
  };
  // O += P·V of tile kt, one commit group: P of keys 16kk.. as the A fragment, V rows
  // 16kk.. (MN-major).
  const auto issue_pv = [&](int kt, const unsigned (&pp)[kNb][2]) {
    hopscore::mbarrier_wait(sm.v_full(stage(kt)), phase(kt));
    const unsigned long long vd = mn_major(sm.v(stage(kt)));
    hopscore::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const unsigned pa[4] = {pp[2 * kk][0], pp[2 * kk][1], pp[2 * kk + 1][0], pp[2 * kk + 1][1]};
      hopscore::wgmma_rs<T, D>(flat<D>(rows.o), pa, wgmma_desc_add(vd, 16 * 128 * kk), true);
    }
    hopscore::wgmma_commit();
  };

  // Tile 0's scores; then per tile: the next tile's S and C's first half issued, this
  // tile's softmax under them, C's second half and P·V issued, the next tile's scores
  // completed under P·V. The last tile is outside the loop: no product is in flight
  // across its back edge (ptxas cannot tell which iteration is the last and would
  // serialise every wgmma of the kernel).
  float sc[kNb][4];
  unsigned pp[kNb][2];
  hopscore::mbarrier_wait(sm.q_full(), 0);
  {
    Ahead first;
    issue_s_and_c(0, first);
    issue_c_rest(0, first);
    hopscore::wgmma_wait<0>();
    complete_scores(0, first, sc);
  }
  for (int kt = 0; kt + 1 < tiles; ++kt) {
    Ahead next;
    issue_s_and_c(kt + 1, next);
    softmax(kt, sc, pp);
    issue_c_rest(kt + 1, next);
    issue_pv(kt, pp);
    hopscore::wgmma_wait<1>();  // S and C of tile kt + 1; tile kt's P·V may still run
    complete_scores(kt + 1, next, sc);
  }
  softmax(tiles - 1, sc, pp);
  issue_pv(tiles - 1, pp);
  hopscore::wgmma_wait<0>();

  // Rows g and g + 8 of the warp; masked rows (and rows whose keys are all masked) are 0.
  const unsigned width = p.heads * D;
  const size_t col0 = (size_t)blockIdx.y * D;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = qt * kRows + 16 * warp + g + 8 * h;
    T* row = i < len ? p.out + (size_t)(start + i) * width + col0 : nullptr;
    rows.write(h, row, i < len && p.mask[start + i] != 0.0f, D, lane);
  }
}

template <typename T> __device__ void attention(const hopscore::DisentangledV5Params<T>& p) {
  HOPSCORE_DYNAMIC_SMEM(unsigned char, raw);
  const Layout sm{raw + hopscore::smem_align_pad(raw, 1024)};
  const int seq = (int)blockIdx.z;
  const int start = (int)p.cu_seqlens[seq];
  const int len = (int)p.cu_seqlens[seq + 1] - start;
  const int qt0 = kConsumers * (int)blockIdx.x;
  if (qt0 * kRows >= len) return;  // whole block: before any barrier
  const int tiles = (len + kKeys - 1) / kKeys;
  const int active = tiles - qt0 < kConsumers ? tiles - qt0 : kConsumers;  // consumers with query rows
  if (threadIdx.x == 0) {
    hopscore::mbarrier_init(sm.q_full(), 1);
    for (int s = 0; s < 2; ++s) {
      hopscore::mbarrier_init(sm.k_full(s), 1);
      hopscore::mbarrier_init(sm.k_empty(s), 128 * active);
      hopscore::mbarrier_init(sm.v_full(s), 1);
      hopscore::mbarrier_init(sm.v_empty(s), 128 * active);
      for (int c = 0; c < kConsumers; ++c) {
        hopscore::mbarrier_init(sm.pk_full(c, s), 1);
        hopscore::mbarrier_init(sm.pk_empty(c, s), 128);
      }
    }
    for (int c = 0; c < kConsumers; ++c) {
      hopscore::mbarrier_init(sm.pq_full(c), 1);
      hopscore::mbarrier_init(sm.pq_empty(c), 128);
    }
    hopscore::mbarrier_init_fence();
  }
  __syncthreads();
  // Lane 0's warpgroup index, broadcast: ptxas then knows the branches below are
  // uniform across each warp, which it needs (with band_scores' fixed widths) to keep
  // the wgmma chains asynchronous instead of serialising them (warning C7520).
  const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
  if (wg == 0) {
    hopscore::setmaxnreg_dec<24>();
    if (threadIdx.x == 0) produce(p, sm, start, qt0, active, tiles);
    return;
  }
  hopscore::setmaxnreg_inc<240>();
  if (wg - 1 < active) consume(p, sm, wg - 1, active, start, len, qt0 + wg - 1, tiles);
}
#endif

// The entry's body: v5 on sm_90a (and in the emulator); any other image traps, as the
// launcher never runs it there.
template <typename T> __device__ __forceinline__ void run(const hopscore::DisentangledV5Params<T>& p) {
#if defined(HOPSCORE_CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  attention<T>(p);
#else
  __trap();
#endif
}
}  // namespace v5
}  // namespace

extern "C" __global__ void __launch_bounds__(hopscore::geometry::DA_V5_THREADS, 1)
    disentangled_attention_v5_bf16(const __grid_constant__ hopscore::DisentangledV5Params<__nv_bfloat16> p) {
  v5::run(p);
}
HOPSCORE_ENTRY(disentangled_attention_v5_bf16);
extern "C" __global__ void __launch_bounds__(hopscore::geometry::DA_V5_THREADS, 1)
    disentangled_attention_v5_f16(const __grid_constant__ hopscore::DisentangledV5Params<__half> p) {
  v5::run(p);
}
HOPSCORE_ENTRY(disentangled_attention_v5_f16);
