// disentangled_attention: DeBERTa attention (c2c + c2p + p2c) over packed sequences,
// flash-style (online softmax over key tiles), position scores computed on chip.
// CPU twin: src/backend/cpu/disentangled_attention.rs (the exact semantics).
//
// For sequence s, head h, rows i, j of the sequence and r = i − j, x(r) = rel_index[r +
// rel_base] (non-decreasing in r):
//   score[i,j] = scale · (Q_i·K_j + Q_i·PK[x(r)] + K_j·PQ[x(r)])
// Masked keys are left out of the softmax, masked query rows output 0.
//
// Entries: _f32 runs v1, _bf16 and _f16 run v2 (below).
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
// = 4 · ((64 + BR) · LD + 2048 + 192) bytes; see `smem_bytes` in
// src/backend/cuda/disentangled_attention.rs.
#include "common.cuh"

namespace {

constexpr int kTile = 32;           // query rows and key rows per tile
constexpr int kThreads = 128;       // 4 warps
constexpr int kRowsPerWarp = 8;     // kTile / (kThreads / 32)
constexpr int kBand = 2 * kTile - 1;  // offsets per (query tile, key tile)
constexpr int kMaxCols = 4;         // head_size ≤ 128 = 32 lanes · 4

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
  unsigned* xs = reinterpret_cast<unsigned*>(Cs + 2048);
  unsigned* slot = xs + 64;
  unsigned* rows = slot + 64;

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


// v2 (bf16/f16 entries): the same tiling and band, with the three products (Q·Kᵀ, the
// band scores, P·V) on tensor cores through nvcuda::wmma m16n16k16 (16-bit inputs, f32
// accumulators). Inputs are staged in shared memory as T, columns zero-padded to
// dp = roundup(head_size, 16); the probabilities are rounded to T for P·V (their row
// sums use the rounded values), the output accumulator O lives in shared memory (f32)
// and is rescaled row-wise on CUDA cores before each P·V.
//
// Dynamic shared memory (bytes; ldo = dp + 4 floats, ldh = dp + 8 elements of T,
// BR = 64 with a band, else 32; every wmma tile pointer is 32-byte aligned):
//   Os f32 [32][ldo] | Ss f32 [32][36] (scores; then P as T [32][40]) |
//   Cs f32 [2048] (c2p band scores [32][64], p2c band scores [64][32]) |
//   Qs T [32][ldh] | Ks T [32][ldh] | Bs T [BR][ldh] (band rows, then V) |
//   xs, slot, rows unsigned [64] each
// = 4·32·ldo + 4608 + 8192 + 2·(64 + BR)·ldh + 768 bytes.
template <typename T>
__device__ void disentangled_attention_wmma(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ pos_key, const T* __restrict__ pos_query,
    const unsigned* __restrict__ rel_index, unsigned rel_base,
    const unsigned* __restrict__ cu_seqlens, const float* __restrict__ mask, T* __restrict__ out,
    unsigned heads, unsigned head_size, float scale) {
  using namespace nvcuda;
  typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> FragA;
  typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> FragB;
  typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

  HOPSCORE_DYNAMIC_SMEM(float, smem);
  const int d = (int)head_size;
  const int dp = (d + 15) & ~15;
  const int ldh = dp + 8, ldo = dp + 4;
  constexpr int ldsc = 36, ldp = 40;
  const int width = (int)(heads * head_size);
  const int h = (int)blockIdx.y;
  const int seq = (int)blockIdx.z;
  const int start = (int)cu_seqlens[seq];
  const int len = (int)cu_seqlens[seq + 1] - start;
  const int i0 = (int)blockIdx.x * kTile;
  if (i0 >= len) return;

  const bool c2p = rel_index != nullptr && pos_key != nullptr;
  const bool p2c = rel_index != nullptr && pos_query != nullptr;
  const bool band = c2p || p2c;

  float* Os = smem;
  float* Ss = Os + kTile * ldo;
  T* Ps = reinterpret_cast<T*>(Ss);
  float* Cs = Ss + kTile * ldsc;
  T* Qs = reinterpret_cast<T*>(Cs + 2048);
  T* Ks = Qs + kTile * ldh;
  T* Bs = Ks + kTile * ldh;
  unsigned* xs = reinterpret_cast<unsigned*>(Bs + (band ? 64 : kTile) * ldh);
  unsigned* slot = xs + 64;
  unsigned* rows = slot + 64;

  const int tid = (int)threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int ir0 = warp * kRowsPerWarp;
  const size_t col0 = (size_t)h * d;
  const float neg_inf = -__builtin_huge_valf();
  const T zero = hopscore::from_float<T>(0.0f);

  // rows [0, 32) of `dst` (ld ldh) ← rows row0.. of `src` (zero past `limit`, and in
  // the padding columns).
  auto stage = [&](T* dst, const T* src, int row0, int limit) {
    for (int e = tid; e < kTile * dp; e += kThreads) {
      const int r = e / dp, c = e - r * dp;
      const int t = row0 + r;
      dst[r * ldh + c] = t < limit && c < d ? src[(size_t)(start + t) * width + col0 + c] : zero;
    }
  };
  // rows [0, roundup16(n)) of Bs ← table rows rows[0..n) of `table` (zero beyond n).
  auto stage_band = [&](const T* table, int n) {
    const int n16 = (n + 15) & ~15;
    for (int e = tid; e < n16 * dp; e += kThreads) {
      const int r = e / dp, c = e - r * dp;
      Bs[r * ldh + c] = r < n && c < d ? table[(size_t)rows[r] * width + col0 + c] : zero;
    }
  };

  stage(Qs, q, i0, len);
  for (int e = tid; e < kTile * ldo; e += kThreads) Os[e] = 0.0f;

  float m_run[kRowsPerWarp], l_run[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m_run[r] = neg_inf;
    l_run[r] = 0.0f;
  }

  for (int j0 = 0; j0 < len; j0 += kTile) {
    __syncthreads();  // the previous tile is done with Ks, Bs, Cs, Ss/Ps, Os
    stage(Ks, k, j0, len);
    if (band) band_offsets(i0, j0, len, rel_index, rel_base, xs, tid);
    __syncthreads();
    const int nslots = band ? band_slots(xs, slot, rows, tid) : 0;
    const int nx = (nslots + 15) >> 4;  // 16-column blocks of band scores

    // c2c: Ss = Q · Kᵀ, warp w → block (w / 2, w % 2).
    {
      const int a = warp >> 1, b = warp & 1;
      hopscore::wmma_abt_tile(Qs + 16 * a * ldh, Ks + 16 * b * ldh, ldh, dp, Ss + 16 * a * ldsc + 16 * b, ldsc);
    }

    if (c2p) {
      __syncthreads();  // rows[] complete
      stage_band(pos_key, nslots);
      __syncthreads();
      // Cs[i][x] = Q_i · PK[rows[x]] ([32][64]).
      for (int blk = warp; blk < 2 * nx; blk += kThreads / 32) {
        const int a = blk & 1, b = blk >> 1;
        hopscore::wmma_abt_tile(Qs + 16 * a * ldh, Bs + 16 * b * ldh, ldh, dp, Cs + 16 * a * 64 + 16 * b, 64,
                               wmma::mem_row_major);
      }
    }
    __syncthreads();  // Ss (and Cs) complete
    float s[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      s[r] = Ss[(ir0 + r) * ldsc + lane];
      if (c2p) s[r] += Cs[(ir0 + r) * 64 + slot[ir0 + r - lane + kTile - 1]];
    }

    if (p2c) {
      __syncthreads();  // done with Bs and Cs
      stage_band(pos_query, nslots);
      __syncthreads();
      // Cs[x][j] = K_j · PQ[rows[x]] ([64][32]: stored column-major from (j, x)).
      for (int blk = warp; blk < 2 * nx; blk += kThreads / 32) {
        const int a = blk & 1, b = blk >> 1;
        hopscore::wmma_abt_tile(Ks + 16 * a * ldh, Bs + 16 * b * ldh, ldh, dp, Cs + 16 * a + 16 * b * kTile, kTile,
                               wmma::mem_col_major);
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) s[r] += Cs[slot[ir0 + r - lane + kTile - 1] * kTile + lane];
    }

    __syncthreads();  // done with Bs, Cs, Ss
    stage(Bs, v, j0, len);  // V tile (rows past the sequence are 0, never NaN)

    // Online softmax; P (rounded to T) → Ps, O rows rescaled.
    const int j = j0 + lane;
    const bool key_ok = j < len && mask[start + j] != 0.0f;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float x = key_ok ? s[r] * scale : neg_inf;
      const float m_new = fmaxf(m_run[r], hopscore::warp_max(x));
      float p, corr;
      if (m_new == neg_inf) {
        p = 0.0f;
        corr = 1.0f;
      } else {
        p = expf(x - m_new);
        corr = expf(m_run[r] - m_new);
      }
      const T pt = hopscore::from_float<T>(p);
      m_run[r] = m_new;
      l_run[r] = l_run[r] * corr + hopscore::warp_sum(hopscore::to_float(pt));
      Ps[(ir0 + r) * ldp + lane] = pt;
      for (int c = lane; c < dp; c += 32) Os[(ir0 + r) * ldo + c] *= corr;
    }
    __syncthreads();

    // Os += P · V, warp w → blocks (a, b) = (blk % 2, blk / 2) of [32][dp].
    for (int blk = warp; blk < 2 * (dp >> 4); blk += kThreads / 32) {
      const int a = blk & 1, b = blk >> 1;
      FragC acc;
      wmma::load_matrix_sync(acc, Os + 16 * a * ldo + 16 * b, ldo, wmma::mem_row_major);
      for (int kk = 0; kk < kTile; kk += 16) {
        FragA fa;
        FragB fb;
        wmma::load_matrix_sync(fa, Ps + 16 * a * ldp + kk, ldp);
        wmma::load_matrix_sync(fb, Bs + kk * ldh + 16 * b, ldh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(Os + 16 * a * ldo + 16 * b, acc, ldo, wmma::mem_row_major);
    }
  }
  __syncthreads();  // Os complete

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = i0 + ir0 + r;
    if (i >= len) continue;
    const bool row_ok = mask[start + i] != 0.0f && l_run[r] > 0.0f;
    const float inv = row_ok ? 1.0f / l_run[r] : 0.0f;
    T* o = out + (size_t)(start + i) * width + col0;
    for (int c = lane; c < d; c += 32)
      o[c] = hopscore::from_float<T>(row_ok ? Os[(ir0 + r) * ldo + c] * inv : 0.0f);
  }
}

}  // namespace

extern "C" __global__ void disentangled_attention_f32(
    const float* q, const float* k, const float* v, const float* pos_key, const float* pos_query,
    const unsigned* rel_index, unsigned rel_base, const unsigned* cu_seqlens, const float* mask,
    float* out, unsigned num_seqs, unsigned heads, unsigned head_size, float scale) {
  (void)num_seqs;  // the grid's z extent
  disentangled_attention<float>(q, k, v, pos_key, pos_query, rel_index, rel_base, cu_seqlens, mask,
                              out, heads, head_size, scale);
}
HOPSCORE_ENTRY(disentangled_attention_f32);
extern "C" __global__ void disentangled_attention_bf16(
    const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* pos_key, const __nv_bfloat16* pos_query,
    const unsigned* rel_index, unsigned rel_base, const unsigned* cu_seqlens, const float* mask,
    __nv_bfloat16* out, unsigned num_seqs, unsigned heads, unsigned head_size, float scale) {
  (void)num_seqs;  // the grid's z extent
  disentangled_attention_wmma<__nv_bfloat16>(q, k, v, pos_key, pos_query, rel_index, rel_base, cu_seqlens,
                                   mask, out, heads, head_size, scale);
}
HOPSCORE_ENTRY(disentangled_attention_bf16);
extern "C" __global__ void disentangled_attention_f16(
    const __half* q, const __half* k, const __half* v, const __half* pos_key, const __half* pos_query,
    const unsigned* rel_index, unsigned rel_base, const unsigned* cu_seqlens, const float* mask,
    __half* out, unsigned num_seqs, unsigned heads, unsigned head_size, float scale) {
  (void)num_seqs;  // the grid's z extent
  disentangled_attention_wmma<__half>(q, k, v, pos_key, pos_query, rel_index, rel_base, cu_seqlens,
                                   mask, out, heads, head_size, scale);
}
HOPSCORE_ENTRY(disentangled_attention_f16);
