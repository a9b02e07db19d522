// t5_attention: T5 attention over packed sequences (varlen, cu_seqlens), for the
// encoder's bidirectional and the decoder's causal self-attention with the relative
// position bucket bias, and for the decoder's cross-attention (separate query and
// key layouts, no bias). Scores are q·kᵀ, not scaled (T5 folds the scale into its
// initialisation), plus bias[h] = table[index[j − i + max_len − 1] · heads + h]
// looked up per score: the bias of a head is a function of the bucket of j − i only,
// so no [heads, L, L] tensor is built. Query row i of sequence s attends to the keys
// of sequence s of the key layout with mask 1 (j ≤ i when causal); query rows with
// mask 0, and rows without a key, output zeros.
//
// v1: grid (sequence, tile of WARPS query rows, head), one warp per query row; the K
// and V tiles of BK keys are staged in shared memory as f32 for the block's warps;
// lanes split the d columns (d ≤ 128: 4 per lane), a score is a warp_sum, the softmax
// is online (running max m and sum l) and the context is accumulated in f32 registers.
// v3 below: mma.sync tensor-core tiles for bf16/f16 with d a multiple of 8.
// CPU twin: src/backend/cpu/t5_attention.rs.
#include "flash_v3.cuh"

namespace {
constexpr unsigned WARPS = hopscore::geometry::T5_ROWS;  // query rows per block
constexpr unsigned BK = hopscore::geometry::T5_KEYS;     // keys per shared-memory tile
constexpr unsigned MAX_D = hopscore::geometry::ATTENTION_MAX_D;  // largest head_dim
constexpr unsigned CPL = MAX_D / 32;  // columns per lane
}  // namespace

template <typename T>
__device__ void t5_attention(T* out, const T* q, const T* k, const T* v,
                             const unsigned* q_cu, const float* q_mask, const unsigned* kv_cu,
                             const float* kv_mask, const T* table, const unsigned* index,
                             unsigned heads, unsigned d, unsigned max_len, unsigned causal) {
  HOPSCORE_DYNAMIC_SMEM(float, smem);  // ks [BK][d], vs [BK][d]
  float* ks = smem;
  float* vs = smem + BK * d;
  const unsigned seq = blockIdx.x, h = blockIdx.z;
  const unsigned q0 = q_cu[seq], lq = q_cu[seq + 1] - q0;
  const unsigned k0 = kv_cu[seq], lk = kv_cu[seq + 1] - k0;
  const unsigned first = blockIdx.y * WARPS;
  if (first >= lq) return;  // whole block: a shorter sequence than the longest
  const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned i = first + warp;  // this warp's query row in the sequence
  const size_t width = (size_t)heads * d;
  const bool active = i < lq && q_mask[q0 + i] != 0.0f;

  float qr[CPL], acc[CPL];
#pragma unroll
  for (unsigned c = 0; c < CPL; ++c) {
    const unsigned col = lane + 32 * c;
    qr[c] = active && col < d ? hopscore::to_float(q[(q0 + i) * width + h * d + col]) : 0.0f;
    acc[c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  // The block's last row bounds the keys a causal block reads.
  const unsigned last = min(first + WARPS, lq) - 1;
  const unsigned keys = causal ? min(last + 1, lk) : lk;
  for (unsigned t0 = 0; t0 < keys; t0 += BK) {
    const unsigned n = min(BK, keys - t0);
    for (unsigned e = threadIdx.x; e < n * d; e += blockDim.x) {
      const unsigned r = e / d, col = e % d;
      const size_t at = (k0 + t0 + r) * width + h * d + col;
      ks[r * d + col] = hopscore::to_float(k[at]);
      vs[r * d + col] = hopscore::to_float(v[at]);
    }
    __syncthreads();
    if (active) {
      for (unsigned r = 0; r < n; ++r) {
        const unsigned j = t0 + r;
        if ((causal && j > i) || kv_mask[k0 + j] == 0.0f) continue;
        float part = 0.0f;
#pragma unroll
        for (unsigned c = 0; c < CPL; ++c) {
          const unsigned col = lane + 32 * c;
          if (col < d) part += qr[c] * ks[r * d + col];
        }
        float s = hopscore::warp_sum(part);
        if (table != nullptr) s += hopscore::to_float(table[index[j + max_len - 1 - i] * heads + h]);
        const float m_new = fmaxf(m, s);
        const float scale = expf(m - m_new), p = expf(s - m_new);
        l = l * scale + p;
#pragma unroll
        for (unsigned c = 0; c < CPL; ++c) {
          const unsigned col = lane + 32 * c;
          acc[c] = acc[c] * scale + (col < d ? p * vs[r * d + col] : 0.0f);
        }
        m = m_new;
      }
    }
    __syncthreads();
  }
  if (i >= lq) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (unsigned c = 0; c < CPL; ++c) {
    const unsigned col = lane + 32 * c;
    if (col < d) out[(q0 + i) * width + h * d + col] = hopscore::from_float<T>(acc[c] * inv);
  }
}

// v3 for bf16/f16 when d is a multiple of 8 (D = 64 or 128 the padded head size): the
// FA2-style tiles of flash_v3.cuh, as causal_attention v3. Grid (sequence, 64-row query
// tile, head), 4 warps of 16 query rows; 64-key tiles of the key layout (causal: up to
// the tile on the diagonal, where keys past a row are masked), K and V staged by
// cp.async and double-buffered, Q·Kᵀ and P·V on mma_16816, S, P, O in registers. The
// bias of the 127 distances j − i a (query tile, key tile) pair meets is staged with the
// tile's K and V (f32, two stages) and is S's starting accumulator, so the products add
// to it without an extra pass; the online softmax's scale is 1. Dynamic shared memory: causal v3's plus 2·128 floats (t5_v3_smem).
template <typename T, int D>
__device__ void t5_attention_v3(T* out, const T* q, const T* k, const T* v, const unsigned* q_cu,
                                const float* q_mask, const unsigned* kv_cu, const float* kv_mask,
                                const T* table, const unsigned* index, unsigned heads, unsigned d,
                                unsigned max_len, unsigned causal) {
  using namespace hopscore::flash;
  constexpr int LD = ld<D>(), kBias = int(hopscore::geometry::T5_V3_BIAS);
  HOPSCORE_DYNAMIC_SMEM(float, smem);
  const int seq = (int)blockIdx.x, i0 = (int)blockIdx.y * kRows, h = (int)blockIdx.z;
  const int qstart = (int)q_cu[seq], lq = (int)q_cu[seq + 1] - qstart;
  const int kstart = (int)kv_cu[seq], lk = (int)kv_cu[seq + 1] - kstart;
  if (i0 >= lq) return;  // whole block: shorter sequence than the longest
  T* qs = reinterpret_cast<T*>(smem);  // [64][LD]
  T* kv = qs + kRows * LD;             // [stage][K, V][64][LD]
  float* bias = reinterpret_cast<float*>(kv + 4 * kKeys * LD);  // [stage][kBias]
  const size_t width = (size_t)heads * d, col0 = (size_t)h * d;
  const T* ks0 = k + (size_t)kstart * width + col0;
  const T* vs0 = v + (size_t)kstart * width + col0;
  const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32, g = lane / 4, t = lane % 4;
  // Key tiles: all of the key sequence, or (causal) up to the diagonal tile.
  const int all_tiles = (lk + kKeys - 1) / kKeys;
  const int tiles = causal ? min(all_tiles, (int)blockIdx.y + 1) : all_tiles;

  // Tile kt's K, V and bias into stage kt & 1: bias[o] is that of distance
  // j − i = 64·kt − i0 − 63 + o (0 outside the index, where no real score falls).
  auto stage_kv = [&](int kt) {
    T* dst = kv + (kt & 1) * 2 * kKeys * LD;
    const size_t row0 = (size_t)kt * kKeys * width;
    stage_rows<T, D>(dst, ks0 + row0, lk - kt * kKeys, width, (int)d);
    stage_rows<T, D>(dst + kKeys * LD, vs0 + row0, lk - kt * kKeys, width, (int)d);
    if (table != nullptr && (int)threadIdx.x < kBias - 1) {
      const int at = kt * kKeys - i0 - (kKeys - 1) + (int)threadIdx.x + (int)max_len - 1;
      const bool in = at >= 0 && at < 2 * (int)max_len - 1;
      bias[(kt & 1) * kBias + threadIdx.x] = in ? hopscore::to_float(table[index[at] * heads + h]) : 0.0f;
    }
  };
  stage_rows<T, D>(qs, q + (size_t)(qstart + i0) * width + col0, lq - i0, width, (int)d);
  hopscore::cp_async_commit();
  if (tiles > 0) stage_kv(0);
  hopscore::cp_async_commit();
  hopscore::cp_async_wait<1>();  // the Q tile
  __syncthreads();
  unsigned qf[D / 16][4];
  load_a<D>(qf, qs + 16 * warp * LD, lane);

  Rows16<T, D> rows;
  // Key tile kt; on the diagonal tile of a causal block (kt = blockIdx.y) key column c >
  // row r is masked too. S starts as the bias and the products add to it.
  auto tile = [&](int kt, bool diagonal) {
    const T* kst = kv + (kt & 1) * 2 * kKeys * LD;
    hopscore::cp_async_wait<0>();  // tile kt's K and V
    __syncthreads();  // … and its bias, for every thread; every warp is done with kt − 1
    if (kt + 1 < tiles) stage_kv(kt + 1);
    hopscore::cp_async_commit();

    float s[kNb][4];
    if (table != nullptr) {
      // Element (row 16w + g + 8hh, column 8nb + 2t + e) has distance offset
      // 8(nb − hh) + 2t + e − 16w − g + 63 in the staged bias.
      const float* b = bias + (kt & 1) * kBias + (kKeys - 1) + 2 * t - 16 * warp - g;
#pragma unroll
      for (int nb = 0; nb < kNb; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[nb][i] = b[8 * (nb - i / 2) + (i & 1)];
    } else {
#pragma unroll
      for (int nb = 0; nb < kNb; ++nb)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[nb][i] = 0.0f;
    }
    abt<T, D, kNb, true>(s, qf, kst, lane);
    mask_keys(s, key_bits(kv_mask + kstart, kt * kKeys, lk, lane));
    if (diagonal) mask_after_diagonal(s, warp, lane);
    rows.step(s, 1.4426950408889634f, kst + kKeys * LD, lane);  // scale 1: log2(e)
  };
  // The masking of the diagonal out of the main loop.
  const bool ends_on_diagonal = causal && tiles == (int)blockIdx.y + 1;
  const int plain = ends_on_diagonal ? tiles - 1 : tiles;
  for (int kt = 0; kt < plain; ++kt) tile(kt, false);
  if (ends_on_diagonal) tile(plain, true);
  hopscore::cp_async_wait<0>();

  // Rows g and g + 8 of the warp; masked query rows, and rows without a key, output 0.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = i0 + 16 * warp + g + 8 * hh;
    T* row = i < lq ? out + (size_t)(qstart + i) * width + col0 : nullptr;
    rows.write(hh, row, i < lq && q_mask[qstart + i] != 0.0f, (int)d, lane);
  }
}

#define T5_ATTENTION_ENTRY(SUFFIX, T)                                                            \
  extern "C" __global__ void t5_attention_##SUFFIX(                                             \
      T* out, const T* q, const T* k, const T* v, const unsigned* q_cu, const float* q_mask,    \
      const unsigned* kv_cu, const float* kv_mask, const T* table, const unsigned* index,       \
      unsigned heads, unsigned d, unsigned max_len, unsigned causal) {                          \
    t5_attention(out, q, k, v, q_cu, q_mask, kv_cu, kv_mask, table, index, heads, d, max_len,  \
                 causal);                                                                       \
  }                                                                                             \
  HOPSCORE_ENTRY(t5_attention_##SUFFIX);

#define T5_ATTENTION_V3_ENTRY(SUFFIX, T, D)                                                     \
  extern "C" __global__ void t5_attention_v3_d##D##_##SUFFIX(                                   \
      T* out, const T* q, const T* k, const T* v, const unsigned* q_cu, const float* q_mask,    \
      const unsigned* kv_cu, const float* kv_mask, const T* table, const unsigned* index,       \
      unsigned heads, unsigned d, unsigned max_len, unsigned causal) {                          \
    t5_attention_v3<T, D>(out, q, k, v, q_cu, q_mask, kv_cu, kv_mask, table, index, heads, d,  \
                          max_len, causal);                                                     \
  }                                                                                             \
  HOPSCORE_ENTRY(t5_attention_v3_d##D##_##SUFFIX);

// t5_attention_<T>: v1 (f32, and bf16/f16 with d not a multiple of 8);
// t5_attention_v3_d<D>_<T>: v3.
T5_ATTENTION_ENTRY(f32, float)
T5_ATTENTION_ENTRY(bf16, __nv_bfloat16)
T5_ATTENTION_ENTRY(f16, __half)
T5_ATTENTION_V3_ENTRY(bf16, __nv_bfloat16, 64)
T5_ATTENTION_V3_ENTRY(bf16, __nv_bfloat16, 128)
T5_ATTENTION_V3_ENTRY(f16, __half, 64)
T5_ATTENTION_V3_ENTRY(f16, __half, 128)
