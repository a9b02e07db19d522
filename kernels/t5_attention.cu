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
// CPU twin: src/backend/cpu/t5_attention.rs.
#include "common.cuh"
#include "geometry.cuh"

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

#define T5_ATTENTION_ENTRY(SUFFIX, T)                                                            \
  extern "C" __global__ void t5_attention_##SUFFIX(                                             \
      T* out, const T* q, const T* k, const T* v, const unsigned* q_cu, const float* q_mask,    \
      const unsigned* kv_cu, const float* kv_mask, const T* table, const unsigned* index,       \
      unsigned heads, unsigned d, unsigned max_len, unsigned causal) {                          \
    t5_attention(out, q, k, v, q_cu, q_mask, kv_cu, kv_mask, table, index, heads, d, max_len,  \
                 causal);                                                                       \
  }                                                                                             \
  HOPSCORE_ENTRY(t5_attention_##SUFFIX);

T5_ATTENTION_ENTRY(f32, float)
T5_ATTENTION_ENTRY(bf16, __nv_bfloat16)
T5_ATTENTION_ENTRY(f16, __half)
