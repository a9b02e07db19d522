// The pieces the v3 attention kernels share (disentangled_attention.cu,
// causal_attention.cu): FA2-style tiles on mma.sync. A block of 4 warps owns 64 query
// rows (warp w: rows 16w..16w+15) and walks 64-key tiles; K and V tiles are staged by
// 16-byte cp.async into [64][D + 8] rows of T (D the padded head size, a multiple of
// 16; columns d..D and rows past the sequence zero-filled); S = Q·Kᵀ, P and the context
// O stay in registers as mma_16816 fragments; the online softmax runs in base 2 with
// scale·log2(e) folded into one FFMA per score; P is rounded to T (its row sums use the
// rounded values) and feeds P·V as A fragments straight from the S accumulators' layout.
#pragma once
#include <type_traits>

#include "common.cuh"
#include "geometry.cuh"

namespace hopscore {
namespace flash {

constexpr int kRows = int(geometry::V3_ROWS);  // query rows per block (16 per warp)
constexpr int kKeys = int(geometry::V3_KEYS);  // keys per tile
constexpr int kWarps = int(geometry::ATTENTION_THREADS / 32);
constexpr int kNb = kKeys / 8;  // 8-key column blocks of a score tile

// A count of column blocks as a type (a tile's leading NB blocks, chosen at run time
// among compile-time sizes).
template <int N> using Blocks = std::integral_constant<int, N>;

// Elements per staged row (a 16-byte multiple; the 8 extra skew the banks for ldmatrix).
template <int D> __host__ __device__ constexpr int ld() { return D + int(geometry::V3_PAD); }

// Rows [0, rows) of `dst` ([rows][ld]) ← rows 0.. of `src` (the tile's first row at the
// head's first column; row stride `width`), zero past row `limit` and in columns d..D:
// thread tid copies column 8·(tid % (D/8)) of rows tid / (D/8) + u·(128 / (D/8)).
template <typename T, int D, int Rows = kKeys>
__device__ __forceinline__ void stage_rows(T* dst, const T* src, int limit, size_t width, int d) {
  constexpr int per_row = D / 8, stride = kWarps * 32 / per_row;
  const int r0 = (int)threadIdx.x / per_row, c = 8 * ((int)threadIdx.x % per_row);
  const T* s = src + (size_t)r0 * width + c;
  T* t = dst + r0 * ld<D>() + c;
#pragma unroll
  for (int u = 0; u < Rows / stride; ++u) {
    const bool ok = c < d && r0 + u * stride < limit;
    cp_async_16(t + u * stride * ld<D>(), ok ? s + (size_t)u * stride * width : src, ok ? 16 : 0);
  }
}

// A fragments of 16 rows (`rows`, row-major [16][ld]) for every 16-column step.
template <int D>
__device__ __forceinline__ void load_a(unsigned (&a)[D / 16][4], const void* rows, int lane) {
  const unsigned short* base = static_cast<const unsigned short*>(rows);
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) ldmatrix_x4(a[ks], base + (lane % 16) * ld<D>() + 16 * ks + 8 * (lane / 16));
}

// acc[nb] = A · B[8nb..8nb+8)ᵀ for NB column blocks (NB even) of B rows (row-major
// [n][ld]); the B fragments of two blocks per ldmatrix_x4. Accumulate: acc[nb] += …
// (the caller filled acc, e.g. with a bias that the products then add to for free).
template <typename T, int D, int NB, bool Accumulate = false>
__device__ __forceinline__ void abt(float (&acc)[NB][4], const unsigned (&a)[D / 16][4], const T* b, int lane) {
  if (!Accumulate) {
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nb][i] = 0.0f;
  }
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks)
#pragma unroll
    for (int nb = 0; nb < NB; nb += 2) {
      unsigned r[4];
      ldmatrix_x4(r, b + (8 * nb + lane % 8 + 8 * (lane / 16)) * ld<D>() + 16 * ks + 8 * ((lane / 8) % 2));
      const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
      mma_16816<T>(acc[nb], a[ks], b0);
      mma_16816<T>(acc[nb + 1], a[ks], b1);
    }
}

// Which keys j0 + c (c < 64) count: j < len and mask 1. Bit 8nb + e of the result is
// this lane's score column 8nb + 2t + e (t = lane % 4).
__device__ __forceinline__ unsigned long long key_bits(const float* mask, int j0, int len, int lane) {
  const int j = j0 + lane;
  const bool ok0 = j < len && mask[j] != 0.0f;
  const bool ok1 = j + 32 < len && mask[j + 32] != 0.0f;
  const unsigned long long all =
      (unsigned long long)__ballot_sync(0xffffffffu, ok1) << 32 | __ballot_sync(0xffffffffu, ok0);
  return all >> (2 * (lane % 4));
}

// Scores of keys whose bit is clear → −inf (the first NB column blocks of a tile).
template <int NB>
__device__ __forceinline__ void mask_keys(float (&s)[NB][4], unsigned long long keys) {
  const float neg_inf = -__builtin_huge_valf();
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int i = 0; i < 4; ++i) s[nb][i] = (keys >> (8 * nb + (i & 1))) & 1u ? s[nb][i] : neg_inf;
}

// On the tile where key tile and query tile start together (the causal diagonal):
// scores of keys past their query row → −inf. Element i of s[nb] is (row 16·warp + g
// + 8·(i / 2), key 8nb + 2t + i % 2).
template <int NB>
__device__ __forceinline__ void mask_after_diagonal(float (&s)[NB][4], int warp, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (8 * nb + 2 * t + (i & 1) > 16 * warp + g + 8 * (i / 2)) s[nb][i] = -__builtin_huge_valf();
}

// A warp's [16][8·NB] f32 accumulator tile (mma_16816 / wgmma fragments) → rows 0..15
// of `scratch` (row stride Ldc floats); disentangled v3 and v5 gather band scores from it.
template <int NB, int Ldc>
__device__ __forceinline__ void store_scratch(float* scratch, const float (&acc)[NB][4], int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    *reinterpret_cast<float2*>(scratch + g * Ldc + 8 * nb + 2 * t) = make_float2(acc[nb][0], acc[nb][1]);
    *reinterpret_cast<float2*>(scratch + (g + 8) * Ldc + 8 * nb + 2 * t) = make_float2(acc[nb][2], acc[nb][3]);
  }
}

// DeBERTa attention's inputs for one (sequence, head): the sequence's row 0 of q, k and
// v at the head's first column, and the head's columns of the position tables (null
// where c2p or p2c is off).
template <typename T> struct HeadInputs {
  const T *q, *k, *v, *pos_key, *pos_query;
  __device__ __forceinline__ HeadInputs(const T* q_, const T* k_, const T* v_, const T* pk, const T* pq,
                                        size_t row0, size_t col0) {
    q = q_ + row0 + col0;
    k = k_ + row0 + col0;
    v = v_ + row0 + col0;
    pos_key = pk != nullptr ? pk + col0 : nullptr;
    pos_query = pq != nullptr ? pq + col0 : nullptr;
  }
};

// DeBERTa's position band (disentangled_attention v3 and v5): element (row 16w + g + 8h,
// column 8nb + 2t + e) of a warp's S tile meets offset o = 16w + g − 2t + 63 − 8(nb − h)
// − e of the tile diagonal, whose band slot is slot[o]; a lane's elements meet 18
// distinct offsets, read once per tile into sl[nb − h + 1][e].
struct BandSlots {
  int sl[kNb + 1][2];
  __device__ __forceinline__ BandSlots(const unsigned* slot, int warp, int lane) {
    const unsigned* my = slot + 16 * warp + lane / 4 - 2 * (lane % 4) + kKeys - 1;
#pragma unroll
    for (int x = 0; x <= kNb; ++x)
#pragma unroll
      for (int e = 0; e < 2; ++e) sl[x][e] = (int)my[8 - 8 * x - e];
  }

  // s += c2p: `row` is this lane's query row g of an f32 scratch (stride Ldc) indexed by
  // band slot (row g + 8 is 8 rows on).
  template <int Ldc> __device__ __forceinline__ void add_c2p(float (&s)[kNb][4], const float* row) const {
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[nb][i] += row[8 * (i / 2) * Ldc + sl[nb - i / 2 + 1][i & 1]];
  }

  // s += p2c: `key(nb)` is the scratch row (indexed by band slot, stride Ldc) of key
  // 8nb + 2t of this lane (key 8nb + 2t + 1 is the next row).
  template <int Ldc, typename KeyRow> __device__ __forceinline__ void add_p2c(float (&s)[kNb][4], KeyRow key) const {
#pragma unroll
    for (int nb = 0; nb < kNb; ++nb) {
      const float* k = key(nb);
#pragma unroll
      for (int i = 0; i < 4; ++i) s[nb][i] += k[(i & 1) * Ldc + sl[nb - i / 2 + 1][i & 1]];
    }
  }
};

// The running state of a warp's 16 rows: this lane holds rows g and g + 8 (g = lane / 4),
// context columns 8nb + 2t, + 1 of each, and its part of the row sums.
template <typename T, int D> struct Rows16 {
  static constexpr int kDb = D / 8;
  float m[2], l[2];
  float o[kDb][4];

  __device__ __forceinline__ Rows16() {
    m[0] = m[1] = -__builtin_huge_valf();
    l[0] = l[1] = 0.0f;
#pragma unroll
    for (int nb = 0; nb < kDb; ++nb)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[nb][i] = 0.0f;
  }

  // One key tile: scores s (masked ones −inf, not yet scaled) of the tile's first NB
  // column blocks (the keys after them count as masked: NB < kNb skips their products),
  // `sl2` = scale·log2(e), `vs` the staged V tile ([64][ld]).
  template <int NB>
  __device__ __forceinline__ void step(float (&s)[NB][4], float sl2, const T* vs, int lane) {
    static_assert(NB % 2 == 0 && NB <= kNb, "whole 16-key steps of a tile");
    unsigned pp[NB][2];
    probabilities(s, sl2, pp);
    // O += P · V: V fragments of two 8-column blocks per ldmatrix_x4_trans.
#pragma unroll
    for (int kk = 0; kk < NB / 2; ++kk) {
      const unsigned pa[4] = {pp[2 * kk][0], pp[2 * kk][1], pp[2 * kk + 1][0], pp[2 * kk + 1][1]};
#pragma unroll
      for (int nb = 0; nb < kDb; nb += 2) {
        unsigned r[4];
        ldmatrix_x4_trans(r, vs + (16 * kk + lane % 16) * ld<D>() + 8 * nb + 8 * (lane / 16));
        const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
        mma_16816<T>(o[nb], pa, b0);
        mma_16816<T>(o[nb + 1], pa, b1);
      }
    }
  }

  // The online softmax of one key tile (its first NB column blocks): updates m and l,
  // rescales O, and returns P rounded to T as A fragments (pp[nb][h]: rows g + 8h,
  // columns 8nb + 2t, + 1), for O += P · V by the caller (mma.sync above, wgmma in v5).
  template <int NB>
  __device__ __forceinline__ void probabilities(float (&s)[NB][4], float sl2, unsigned (&pp)[NB][2]) {
    const float neg_inf = -__builtin_huge_valf();
    float corr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = neg_inf;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) mx = fmaxf(mx, fmaxf(s[nb][2 * h], s[nb][2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[h], mx * sl2);
      // While every key of the row so far is masked, m stays −inf: subtract 0 instead
      // (the scores are −inf, so P is 0, and the accumulators stay 0).
      const float m_use = m_new == neg_inf ? 0.0f : m_new;
      corr[h] = exp2_approx(m[h] - m_use);
      m[h] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        const unsigned packed = pack2<T>(exp2_approx(fmaf(s[nb][2 * h], sl2, -m_use)),
                                         exp2_approx(fmaf(s[nb][2 * h + 1], sl2, -m_use)));
        const float2 r = unpack2<T>(packed);
        sum += r.x + r.y;
        pp[nb][h] = packed;
      }
      l[h] = l[h] * corr[h] + sum;
    }
#pragma unroll
    for (int nb = 0; nb < kDb; ++nb) {
      o[nb][0] *= corr[0];
      o[nb][1] *= corr[0];
      o[nb][2] *= corr[1];
      o[nb][3] *= corr[1];
    }
  }

  // Writes O / l of row h (0: g, 1: g + 8) to `row` (its first d columns), or zeros
  // when `ok` is false or no key counted. Every lane of the warp must call it (the
  // row sums are reduced over the lanes of a row).
  __device__ __forceinline__ void write(int h, T* row, bool ok, int d, int lane) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    if (row == nullptr) return;
    const float inv = ok && sum > 0.0f ? 1.0f / sum : 0.0f;
#pragma unroll
    for (int nb = 0; nb < kDb; ++nb) {
      const int c = 8 * nb + 2 * (lane % 4);
      if (c < d) *reinterpret_cast<unsigned*>(row + c) = pack2<T>(o[nb][2 * h] * inv, o[nb][2 * h + 1] * inv);
    }
  }
};

}  // namespace flash
}  // namespace hopscore
