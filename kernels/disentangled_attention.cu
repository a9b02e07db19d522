// disentangled_attention: DeBERTa attention (c2c + c2p + p2c) over packed sequences,
// flash-style (online softmax over key tiles), position scores computed on chip.
// CPU twin: src/backend/cpu/disentangled_attention.rs (the exact semantics).
//
// For sequence s, head h, rows i, j of the sequence and r = i − j, x(r) = rel_index[r +
// rel_base] (non-decreasing in r):
//   score[i,j] = scale · (Q_i·K_j + Q_i·PK[x(r)] + K_j·PQ[x(r)])
// Masked keys are left out of the softmax, masked query rows output 0.
//
// Entries: _f32 runs v1 (the reference); _v3_d<D>_bf16 and _v3_d<D>_f16 run v3
// (below; v2, nvcuda::wmma with S, P and O through shared memory, is gone).
//
// v1 (CUDA cores, f32 accumulation). Grid (ceil(max_len / 32), heads, num_seqs), 128
// threads. A block owns a 32-row query tile of one (sequence, head) and loops over
// 32-row key tiles. The offsets i − j of a (query tile, key tile) pair are 63
// consecutive values r; their table rows x(r) form a non-decreasing run whose distinct
// values (at most 63, far fewer where buckets saturate) are the band. The band rows of
// PK (then PQ) for this head are staged in shared memory, the band scores Q_i·PK[x] and
// K_j·PQ[x] computed for every distinct x and gathered per (i, j) through slot[i − j +
// 31]. Nothing but the context is written to global memory.
//
// Warp w owns query rows 8w..8w+7 of the tile; lane l holds the score of key column l
// of those rows, so the row max / sum of the online softmax are warp reductions, and
// the output accumulator of row (8w + q) column (l + 32m) lives in lane l.
//
// Dynamic shared memory (floats, LD = head_size + 1, BR = 63 with a band, else 32):
//   Qs [32][LD] | Ks [32][LD] | Bs [BR][LD] (band rows, then the V tile) |
//   Cs [2048] (c2p band scores [32][64], p2c band scores transposed [64][32], then the
//   probabilities [32][33]) | xs [64] | slot [64] | rows [64] (unsigned)
// = 4 · ((64 + BR) · LD + 2048 + 192) bytes: `disentangled_v1_smem` in geometry.cuh.
#include "flash_v3.cuh"
#include "params.cuh"

namespace {

constexpr int kTile = int(hopscore::geometry::DA_V1_TILE);  // query rows and key rows per tile
constexpr int kThreads = int(hopscore::geometry::ATTENTION_THREADS);  // 4 warps
constexpr int kRowsPerWarp = 8;     // kTile / (kThreads / 32)
constexpr int kBand = 2 * kTile - 1;  // offsets per (query tile, key tile)
constexpr int kMaxCols = int(hopscore::geometry::ATTENTION_MAX_D / 32);  // head_size ≤ 128 = 32 lanes · 4

// Table rows of the 63 offsets r = i0 − j0 − 31 + b of a (query tile, key tile) pair:
// xs[b] for b < kBand (offsets clamped into the sequence belong to rows or columns
// past its end and are never gathered). Synchronise before reading xs.
__device__ __forceinline__ void band_offsets(int i0, int j0, int len, const unsigned* rel_index,
                                             unsigned rel_base, unsigned* xs, int tid) {
  if (tid < kBand) {
    int r = i0 - j0 - (kTile - 1) + tid;
    r = r < -(len - 1) ? -(len - 1) : (r > len - 1 ? len - 1 : r);
    xs[tid] = rel_index[(int)rel_base + r];
  }
}

// The distinct rows of xs (non-decreasing): slot[b] = number of changes in xs[1..=b],
// rows[slot] = table row. Returns how many distinct rows there are.
__device__ __forceinline__ int band_slots(const unsigned* xs, unsigned* slot, unsigned* rows, int tid) {
  if (tid < kBand) {
    unsigned sl = 0;
    for (int b = 1; b <= tid; ++b) sl += xs[b] != xs[b - 1] ? 1u : 0u;
    slot[tid] = sl;
    if (tid == 0 || xs[tid] != xs[tid - 1]) rows[sl] = xs[tid];
  }
  int n = 1;
  for (int b = 1; b < kBand; ++b) n += xs[b] != xs[b - 1] ? 1 : 0;
  return n;
}

template <typename T>
__device__ void disentangled_attention(const T* __restrict__ q, const T* __restrict__ k,
                                       const T* __restrict__ v, const T* __restrict__ pos_key,
                                       const T* __restrict__ pos_query,
                                       const unsigned* __restrict__ rel_index, unsigned rel_base,
                                       const unsigned* __restrict__ cu_seqlens,
                                       const float* __restrict__ mask, T* __restrict__ out,
                                       unsigned heads, unsigned head_size, float scale) {
  HOPSCORE_DYNAMIC_SMEM(float, smem);
  const int d = (int)head_size;
  const int ld = d + 1;
  const int width = (int)(heads * head_size);
  const int h = (int)blockIdx.y;
  const int seq = (int)blockIdx.z;
  const int start = (int)cu_seqlens[seq];
  const int len = (int)cu_seqlens[seq + 1] - start;
  const int i0 = (int)blockIdx.x * kTile;
  if (i0 >= len) return;  // whole block: before any barrier

  const bool c2p = rel_index != nullptr && pos_key != nullptr;
  const bool p2c = rel_index != nullptr && pos_query != nullptr;
  const bool band = c2p || p2c;
  const int band_rows = band ? kBand : kTile;

  float* Qs = smem;
  float* Ks = Qs + kTile * ld;
  float* Bs = Ks + kTile * ld;
  float* Cs = Bs + band_rows * ld;
  unsigned* xs = reinterpret_cast<unsigned*>(Cs + hopscore::geometry::DA_V1_SCORES);
  unsigned* slot = xs + hopscore::geometry::DA_V1_SLOTS;
  unsigned* rows = slot + hopscore::geometry::DA_V1_SLOTS;

  const int tid = (int)threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int ir0 = warp * kRowsPerWarp;  // this warp's first query row in the tile
  const size_t col0 = (size_t)h * d;
  const float neg_inf = -__builtin_huge_valf();

  // Query tile → f32 (rows past the sequence are zero).
  for (int e = tid; e < kTile * d; e += kThreads) {
    const int r = e / d, c = e - r * d;
    const int i = i0 + r;
    Qs[r * ld + c] = i < len ? hopscore::to_float(q[(size_t)(start + i) * width + col0 + c]) : 0.0f;
  }

  float m_run[kRowsPerWarp], l_run[kRowsPerWarp], acc[kRowsPerWarp][kMaxCols];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m_run[r] = neg_inf;
    l_run[r] = 0.0f;
#pragma unroll
    for (int m = 0; m < kMaxCols; ++m) acc[r][m] = 0.0f;
  }

  for (int j0 = 0; j0 < len; j0 += kTile) {
    __syncthreads();  // the previous tile is done with Ks, Bs, Cs

    // Key tile → f32.
    for (int e = tid; e < kTile * d; e += kThreads) {
      const int r = e / d, c = e - r * d;
      const int j = j0 + r;
      Ks[r * ld + c] = j < len ? hopscore::to_float(k[(size_t)(start + j) * width + col0 + c]) : 0.0f;
    }
    if (band) band_offsets(i0, j0, len, rel_index, rel_base, xs, tid);
    __syncthreads();
    const int nslots = band ? band_slots(xs, slot, rows, tid) : 0;

    // c2c: s[q] = Q_(ir0+q) · K_lane.
    float s[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) s[r] = 0.0f;
    for (int c = 0; c < d; ++c) {
      const float kv = Ks[lane * ld + c];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) s[r] = fmaf(Qs[(ir0 + r) * ld + c], kv, s[r]);
    }

    if (c2p) {
      __syncthreads();  // rows[] is complete
      for (int e = tid; e < nslots * d; e += kThreads) {
        const int r = e / d, c = e - r * d;
        Bs[r * ld + c] = hopscore::to_float(pos_key[(size_t)rows[r] * width + col0 + c]);
      }
      __syncthreads();
      // Cs[i][x] = Q_i · PK[rows[x]], i = ir0 + q, x = lane, lane + 32.
      for (int half = 0; half < 2; ++half) {
        const int x = lane + 32 * half;
        if (x < nslots) {
          float t[kRowsPerWarp];
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) t[r] = 0.0f;
          for (int c = 0; c < d; ++c) {
            const float pk = Bs[x * ld + c];
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) t[r] = fmaf(Qs[(ir0 + r) * ld + c], pk, t[r]);
          }
#pragma unroll
          for (int r = 0; r < kRowsPerWarp; ++r) Cs[(ir0 + r) * 64 + x] = t[r];
        }
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) s[r] += Cs[(ir0 + r) * 64 + slot[ir0 + r - lane + kTile - 1]];
    }

    if (p2c) {
      __syncthreads();  // done with Bs and Cs (c2p), rows[] complete
      for (int e = tid; e < nslots * d; e += kThreads) {
        const int r = e / d, c = e - r * d;
        Bs[r * ld + c] = hopscore::to_float(pos_query[(size_t)rows[r] * width + col0 + c]);
      }
      __syncthreads();
      // Cs[x][j] = K_j · PQ[rows[x]], j = lane, x = 16·warp + 0..15 (transposed so
      // that the gather below reads one bank per lane).
      {
        constexpr int kSlotsPerWarp = 16;
        float t[kSlotsPerWarp];
#pragma unroll
        for (int u = 0; u < kSlotsPerWarp; ++u) t[u] = 0.0f;
        const int x0 = warp * kSlotsPerWarp;
        if (x0 < nslots) {
          for (int c = 0; c < d; ++c) {
            const float kv = Ks[lane * ld + c];
#pragma unroll
            for (int u = 0; u < kSlotsPerWarp; ++u) {
              const int x = x0 + u < kBand ? x0 + u : kBand - 1;
              t[u] = fmaf(Bs[x * ld + c], kv, t[u]);
            }
          }
#pragma unroll
          for (int u = 0; u < kSlotsPerWarp; ++u)
            if (x0 + u < nslots) Cs[(x0 + u) * kTile + lane] = t[u];
        }
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) s[r] += Cs[slot[ir0 + r - lane + kTile - 1] * kTile + lane];
    }

    __syncthreads();  // done with Bs and Cs
    // Value tile → f32 (into the band buffer).
    for (int e = tid; e < kTile * d; e += kThreads) {
      const int r = e / d, c = e - r * d;
      const int j = j0 + r;
      Bs[r * ld + c] = j < len ? hopscore::to_float(v[(size_t)(start + j) * width + col0 + c]) : 0.0f;
    }

    // Online softmax over this key tile; probabilities → Cs[i][j] (stride 33).
    const int j = j0 + lane;
    const bool key_ok = j < len && mask[start + j] != 0.0f;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float x = key_ok ? s[r] * scale : neg_inf;
      const float m_new = fmaxf(m_run[r], hopscore::warp_max(x));
      float p, corr;
      if (m_new == neg_inf) {  // nothing unmasked yet in this row
        p = 0.0f;
        corr = 1.0f;
      } else {
        p = expf(x - m_new);  // exp(−inf) = 0 for masked keys
        corr = expf(m_run[r] - m_new);
      }
      m_run[r] = m_new;
      l_run[r] = l_run[r] * corr + hopscore::warp_sum(p);
#pragma unroll
      for (int m = 0; m < kMaxCols; ++m) acc[r][m] *= corr;
      Cs[(ir0 + r) * 33 + lane] = p;
    }
    __syncthreads();

    // acc[q][m] += Σ_j P[ir0 + q][j] · V[j][lane + 32m].
    const int jn = len - j0 < kTile ? len - j0 : kTile;
    for (int jj = 0; jj < jn; ++jj) {
      float vv[kMaxCols];
#pragma unroll
      for (int m = 0; m < kMaxCols; ++m) {
        const int c = lane + 32 * m;
        vv[m] = c < d ? Bs[jj * ld + c] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float p = Cs[(ir0 + r) * 33 + jj];
#pragma unroll
        for (int m = 0; m < kMaxCols; ++m) acc[r][m] = fmaf(p, vv[m], acc[r][m]);
      }
    }
  }

  // Normalise and write; masked query rows (and empty rows) are exactly 0.
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = i0 + ir0 + r;
    if (i >= len) continue;
    const bool row_ok = mask[start + i] != 0.0f && l_run[r] > 0.0f;
    const float inv = row_ok ? 1.0f / l_run[r] : 0.0f;
    T* o = out + (size_t)(start + i) * width + col0;
#pragma unroll
    for (int m = 0; m < kMaxCols; ++m) {
      const int c = lane + 32 * m;
      if (c < d) o[c] = hopscore::from_float<T>(row_ok ? acc[r][m] * inv : 0.0f);
    }
  }
}


// v3 (bf16/f16 entries `disentangled_attention_v3_d<D>_<T>`, D = 64 (every DeBERTa) or
// 128 the padded head size; v1 stays the f32 reference). FA2-style: grid (⌈max_len / 64⌉, heads,
// seqs), 4 warps; warp w owns query rows 16w..16w+15 of a 64-row query tile and loops
// over 64-key tiles with S, P and the context O in registers (mma.sync m16n8k16
// fragments, f32 accumulators), an online softmax in exp2 with scale·log2(e) folded into
// the scores, P rounded to T (its row sums use the rounded values) and fed to P·V as A
// fragments straight from the S accumulators. Every tile product is a mma_16816 fed by
// ldmatrix (.trans for V).
//
// Staging: K and V tiles by 16-byte cp.async, double-buffered (tile t + 1 is in flight
// while tile t is computed); columns d..D are zero-filled, as are rows past the sequence.
// The band: for a (query tile, key tile) pair on tile diagonal δ = i0 − j0 the 127
// offsets r = δ − 63 + o (o = 0..126) reach the distinct table rows
// band[e][0..128) (rows past the distinct count repeat the last one) and
// slot[o] = their rank; both come per diagonal e from the host (computed once per batch,
// `band_table` in src/backend/cuda/disentangled_attention.rs), so a tile stages its
// 128 PK and PQ rows with cp.async (issued once the previous tile's band scores are
// gathered) without computing anything. Warp w multiplies its 16 query rows by the
// 80 band rows from slot[16w] (all the offsets its rows meet: c2p) into its 16 rows of
// an f32 scratch, from which its lanes gather the c2p term of their 32 scores through
// slot[]; then its 16 keys by the 80 band rows from slot[48 − 16w] (p2c) into the same
// rows, which every warp reads after a barrier.
//
// Dynamic shared memory (bytes, LD = D + 8 elements per row):
//   scratch f32 [64][88] (the Q tile, staged before the first key tile, shares it) |
//   K, V T [2 stages][2][64][LD] | PK, PQ band T [2][128][LD] | slot u32 [2 stages][128]
// = 22,528 + 512·LD + 512·LD + 1,024 bytes (95 KB at D = 64: two blocks per SM; 159 KB
// at D = 128): `disentangled_v3_smem` in geometry.cuh.
namespace v3 {
using namespace hopscore::flash;
constexpr int kBandRows = int(hopscore::geometry::DA_V3_BAND_ROWS);  // staged table rows per tile (≥ the 127 offsets)
constexpr int kWin = int(hopscore::geometry::DA_V3_WIN);  // band rows one warp multiplies (its offsets span 79)
constexpr int kLdc = int(hopscore::geometry::DA_V3_SCRATCH_LD);  // scratch row stride (floats; rows 16-byte aligned)

// The 128 band rows of one diagonal (table rows `band`) of a position table (`table`
// at the head's first column), as stage_rows.
template <typename T, int D>
__device__ __forceinline__ void stage_band(T* dst, const T* table, const unsigned* band, size_t width, int d) {
  constexpr int per_row = D / 8, stride = kWarps * 32 / per_row;
  const int r0 = (int)threadIdx.x / per_row, c = 8 * ((int)threadIdx.x % per_row);
  T* t = dst + r0 * ld<D>() + c;
#pragma unroll
  for (int u = 0; u < kBandRows / stride; ++u) {
    const T* s = table + (size_t)band[r0 + u * stride] * width + c;
    hopscore::cp_async_16(t + u * stride * ld<D>(), c < d ? s : table, c < d ? 16 : 0);
  }
}

template <typename T, int D>
__device__ void attention(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                          const T* __restrict__ pos_key, const T* __restrict__ pos_query,
                          const unsigned* __restrict__ band_table, const unsigned* __restrict__ cu_seqlens,
                          const float* __restrict__ mask, T* __restrict__ out, unsigned heads, unsigned head_size,
                          float scale) {
  static_assert(kRows * ld<D>() * 2 <= kRows * kLdc * 4, "the Q tile is staged in the scratch");
  constexpr int LD = ld<D>();
  HOPSCORE_DYNAMIC_SMEM(float, smem);
  const int d = (int)head_size;
  const size_t width = (size_t)heads * head_size;
  const size_t col0 = (size_t)blockIdx.y * head_size;
  const int seq = (int)blockIdx.z;
  const int start = (int)cu_seqlens[seq];
  const int len = (int)cu_seqlens[seq + 1] - start;
  const int qt = (int)blockIdx.x, i0 = qt * kRows;
  if (i0 >= len) return;  // whole block: before any barrier
  const int ntiles = (int)gridDim.x;  // key tiles of the longest sequence: diagonals 2·ntiles − 1

  const bool c2p = band_table != nullptr && pos_key != nullptr;
  const bool p2c = band_table != nullptr && pos_query != nullptr;
  const bool band = c2p || p2c;

  float* scratch = smem;                                       // [64][kLdc]: rows 16w.. are warp w's
  T* qs = reinterpret_cast<T*>(smem);                          // [64][LD], before the first tile
  T* kv = reinterpret_cast<T*>(smem + kRows * kLdc);           // [stage][K, V][64][LD]
  T* pk = kv + 4 * kKeys * LD;                                 // [128][LD]
  T* pq = pk + kBandRows * LD;
  unsigned* slots = reinterpret_cast<unsigned*>(pq + kBandRows * LD);  // [stage][128]

  const int tid = (int)threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const HeadInputs<T> in(q, k, v, c2p ? pos_key : nullptr, p2c ? pos_query : nullptr, (size_t)start * width, col0);
  const T *qh = in.q, *kh = in.k, *vh = in.v, *pkh = in.pos_key, *pqh = in.pos_query;

  // Key tile kt (K, V and, with the band, its diagonal's slots) into stage kt % 2.
  auto stage_kv = [&](int kt) {
    T* dst = kv + (kt & 1) * 2 * kKeys * LD;
    const size_t row0 = (size_t)kt * kKeys * width;
    stage_rows<T, D>(dst, kh + row0, len - kt * kKeys, width, d);
    stage_rows<T, D>(dst + kKeys * LD, vh + row0, len - kt * kKeys, width, d);
    if (band && tid < kBandRows / 4) {
      const unsigned* sl = band_table + (size_t)(qt - kt + ntiles - 1) * 2 * kBandRows + kBandRows;
      hopscore::cp_async_16(slots + (kt & 1) * kBandRows + 4 * tid, sl + 4 * tid);
    }
  };
  auto stage_pos = [&](int kt) {
    const unsigned* rows = band_table + (size_t)(qt - kt + ntiles - 1) * 2 * kBandRows;
    if (c2p) stage_band<T, D>(pk, pkh, rows, width, d);
    if (p2c) stage_band<T, D>(pq, pqh, rows, width, d);
  };

  stage_rows<T, D>(qs, qh + (size_t)i0 * width, len - i0, width, d);
  hopscore::cp_async_commit();
  stage_kv(0);
  if (band) stage_pos(0);
  hopscore::cp_async_commit();
  hopscore::cp_async_wait<1>();  // the Q tile (tile 0 may still be in flight)
  __syncthreads();
  unsigned qf[D / 16][4];  // this warp's 16 query rows as A fragments, for every tile
  load_a<D>(qf, qs + 16 * warp * LD, lane);

  const float sl2 = scale * 1.4426950408889634f;  // scale · log2(e)
  Rows16<T, D> rows;
  const int tiles = (len + kKeys - 1) / kKeys;
  for (int kt = 0; kt < tiles; ++kt) {
    const T* ks = kv + (kt & 1) * 2 * kKeys * LD;
    const unsigned* slot = slots + (kt & 1) * kBandRows;
    hopscore::cp_async_wait<0>();  // tile kt's K, V, slots and band rows
    __syncthreads();  // … for every thread; every warp is done with tile kt − 1 (and Q)
    if (kt + 1 < tiles) stage_kv(kt + 1);
    hopscore::cp_async_commit();

    // S = Q · Kᵀ ([16][64] per warp).
    float s[kNb][4];
    abt<T, D, kNb>(s, qf, ks, lane);

    if (band) {
      const BandSlots sl(slot, warp, lane);
      float* mine = scratch + 16 * warp * kLdc;
      if (c2p) {  // c2p of this warp's rows: Q · PK[slot[16w] ..)ᵀ, gathered by the warp
        float acc[kWin / 8][4];
        abt<T, D, kWin / 8>(acc, qf, pk + slot[16 * warp] * LD, lane);
        store_scratch<kWin / 8, kLdc>(mine, acc, lane);
        __syncwarp();
        sl.add_c2p<kLdc>(s, mine + g * kLdc - (int)slot[16 * warp]);
        __syncwarp();  // the warp's scratch rows are free again
      }
      if (p2c) {  // p2c of this warp's 16 keys: K · PQ[slot[48 − 16w] ..)ᵀ, gathered by all
        unsigned kf[D / 16][4];
        load_a<D>(kf, ks + 16 * warp * LD, lane);
        float acc[kWin / 8][4];
        abt<T, D, kWin / 8>(acc, kf, pq + slot[48 - 16 * warp] * LD, lane);
        store_scratch<kWin / 8, kLdc>(mine, acc, lane);
      }
      __syncthreads();  // p2c rows complete; the band rows are consumed
      if (kt + 1 < tiles) stage_pos(kt + 1);
      hopscore::cp_async_commit();
      if (p2c) {
        // Keys 8nb + 2t + e: rows of warp nb / 2, whose band rows start at slot[48 − 16(nb / 2)].
        sl.add_p2c<kLdc>(s, [&](int nb) { return scratch + (8 * nb + 2 * t) * kLdc - (int)slot[48 - 16 * (nb / 2)]; });
      }
    }

    mask_keys(s, key_bits(mask + start, kt * kKeys, len, lane));
    rows.step(s, sl2, ks + kKeys * LD, lane);
  }

  // Rows g and g + 8 of the warp; masked rows (and rows whose keys are all masked) are 0.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = i0 + 16 * warp + g + 8 * h;
    T* row = i < len ? out + (size_t)(start + i) * width + col0 : nullptr;
    rows.write(h, row, i < len && mask[start + i] != 0.0f, d, lane);
  }
}
}  // namespace v3
}  // namespace

extern "C" __global__ void disentangled_attention_f32(const hopscore::DisentangledAttentionParams<float> p) {
  disentangled_attention<float>(p.q, p.k, p.v, p.pos_key, p.pos_query, p.rel_index, p.rel_base, p.cu_seqlens,
                                p.mask, p.out, p.heads, p.head_size, p.scale);
}
HOPSCORE_ENTRY(disentangled_attention_f32);

#define DISENTANGLED_ATTENTION_V3(D, SUFFIX, T)                                                     \
  extern "C" __global__ void __launch_bounds__(hopscore::geometry::ATTENTION_THREADS)                \
      disentangled_attention_v3_d##D##_##SUFFIX(const hopscore::DisentangledAttentionParams<T> p) { \
    v3::attention<T, D>(p.q, p.k, p.v, p.pos_key, p.pos_query, p.rel_index, p.cu_seqlens, p.mask,   \
                        p.out, p.heads, p.head_size, p.scale);                                      \
  }                                                                                                 \
  HOPSCORE_ENTRY(disentangled_attention_v3_d##D##_##SUFFIX);
DISENTANGLED_ATTENTION_V3(64, bf16, __nv_bfloat16)
DISENTANGLED_ATTENTION_V3(128, bf16, __nv_bfloat16)
DISENTANGLED_ATTENTION_V3(64, f16, __half)
DISENTANGLED_ATTENTION_V3(128, f16, __half)
