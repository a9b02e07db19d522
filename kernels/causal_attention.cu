// causal_attention: causal self-attention over packed sequences (varlen, no padding,
// cu_seqlens) with grouped-query heads, flash-style. Input is the fused projection
// qkv [tokens, (heads + 2·kv_heads)·d] (queries, keys, values); query head h reads
// key/value head h / (heads / kv_heads). For query row i of a sequence the keys j ≤ i
// of the same sequence with mask 1 take part; rows with mask 0 output zeros.
//
// Grid (sequence, query tile of BQ rows, head); BQ·TPR threads, TPR per query row.
// The Q tile and each K (then V) tile are staged in shared memory as f32; the key
// tiles up to the diagonal are swept with an online softmax (running max m and sum l
// per row) and the context accumulated in f32 registers (TPR threads split the d
// columns of a row). v1: CUDA-core FMAs, head_dim ≤ 128.
// CPU twin: src/backend/cpu/causal_attention.rs.
#include "common.cuh"

namespace {
constexpr unsigned BQ = 32;             // query rows per block
constexpr unsigned BK = 32;             // keys per tile
constexpr unsigned TPR = 4;             // threads per query row
constexpr unsigned MAX_D = 128;         // largest head_dim
constexpr unsigned COLS = MAX_D / TPR;  // context columns per thread
constexpr unsigned KPT = BK / TPR;      // scores per thread and tile
}  // namespace

template <typename T>
__device__ void causal_attention(T* out, const T* qkv, const unsigned* cu_seqlens,
                                 const float* mask, unsigned heads, unsigned kv_heads,
                                 unsigned d, float scale) {
  // qs [BQ][d + 1], kv [BK][d + 1] (keys, then values of the same tile), ps [BQ][BK + 1].
  HOPSCORE_DYNAMIC_SMEM(float, smem);
  const unsigned seq = blockIdx.x, q0 = blockIdx.y * BQ, h = blockIdx.z;
  const unsigned start = cu_seqlens[seq], len = cu_seqlens[seq + 1] - start;
  if (q0 >= len) return;  // whole block: shorter sequence than the longest
  const unsigned ld = d + 1, lp = BK + 1;
  float* qs = smem;
  float* kv = qs + BQ * ld;
  float* ps = kv + BK * ld;
  const size_t width = (size_t)(heads + 2 * kv_heads) * d;
  const unsigned g = h / (heads / kv_heads);
  const T* base = qkv + (size_t)start * width;
  const T* qsrc = base + (size_t)h * d;
  const T* ksrc = base + (size_t)(heads + g) * d;
  const T* vsrc = base + (size_t)(heads + kv_heads + g) * d;
  const float* m_seq = mask + start;

  const unsigned tid = threadIdx.x, r = tid / TPR, sub = tid % TPR;
  const unsigned i = q0 + r;  // this thread's query row in the sequence
  const bool active = i < len && m_seq[i] != 0.0f;

  for (unsigned idx = tid; idx < BQ * d; idx += blockDim.x) {
    const unsigned rr = idx / d, c = idx % d;
    qs[rr * ld + c] = q0 + rr < len ? hopscore::to_float(qsrc[(size_t)(q0 + rr) * width + c]) : 0.0f;
  }

  float acc[COLS];
#pragma unroll
  for (unsigned k = 0; k < COLS; ++k) acc[k] = 0.0f;
  float m = -INFINITY, l = 0.0f;

  const unsigned kend = min(len, q0 + BQ);  // keys past the tile's last row never count
  for (unsigned k0 = 0; k0 < kend; k0 += BK) {
    const unsigned kn = min(BK, len - k0);
    __syncthreads();  // the previous V tile is consumed (and Q is staged)
    for (unsigned idx = tid; idx < BK * d; idx += blockDim.x) {
      const unsigned jj = idx / d, c = idx % d;
      kv[jj * ld + c] = jj < kn ? hopscore::to_float(ksrc[(size_t)(k0 + jj) * width + c]) : 0.0f;
    }
    __syncthreads();

    float sc[KPT];
#pragma unroll
    for (unsigned k = 0; k < KPT; ++k) sc[k] = 0.0f;
    for (unsigned c = 0; c < d; ++c) {
      const float q = qs[r * ld + c];
#pragma unroll
      for (unsigned k = 0; k < KPT; ++k) sc[k] += q * kv[(sub + TPR * k) * ld + c];
    }
    float tmax = -INFINITY;
#pragma unroll
    for (unsigned k = 0; k < KPT; ++k) {
      const unsigned j = k0 + sub + TPR * k;
      const bool ok = j <= i && j < len && m_seq[j] != 0.0f;
      sc[k] = ok ? sc[k] * scale : -INFINITY;
      tmax = fmaxf(tmax, sc[k]);
    }
    // The TPR threads of a row are adjacent lanes of one warp.
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
    const float mnew = fmaxf(m, tmax);
    const bool any = mnew != -INFINITY;  // some key of this row counted so far
    const float corr = any ? expf(m - mnew) : 1.0f;
    float psum = 0.0f;
#pragma unroll
    for (unsigned k = 0; k < KPT; ++k) {
      const float p = sc[k] != -INFINITY ? expf(sc[k] - mnew) : 0.0f;
      ps[r * lp + sub + TPR * k] = p;
      psum += p;
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    psum += __shfl_xor_sync(0xffffffffu, psum, 2);
    l = l * corr + psum;
    m = mnew;
#pragma unroll
    for (unsigned k = 0; k < COLS; ++k) acc[k] *= corr;

    __syncthreads();  // every thread is done with K; P is complete
    for (unsigned idx = tid; idx < BK * d; idx += blockDim.x) {
      const unsigned jj = idx / d, c = idx % d;
      kv[jj * ld + c] = jj < kn ? hopscore::to_float(vsrc[(size_t)(k0 + jj) * width + c]) : 0.0f;
    }
    __syncthreads();
    for (unsigned jj = 0; jj < kn; ++jj) {
      const float p = ps[r * lp + jj];
      const float* vr = kv + jj * ld;
#pragma unroll
      for (unsigned k = 0; k < COLS; ++k) {
        const unsigned c = sub + TPR * k;
        if (c < d) acc[k] += p * vr[c];
      }
    }
  }

  if (i < len) {
    T* o = out + (size_t)(start + i) * heads * d + (size_t)h * d;
    const float inv = active ? 1.0f / l : 0.0f;
#pragma unroll
    for (unsigned k = 0; k < COLS; ++k) {
      const unsigned c = sub + TPR * k;
      if (c < d) o[c] = hopscore::from_float<T>(active ? acc[k] * inv : 0.0f);
    }
  }
}

#define CAUSAL_ATTENTION_ENTRY(SUFFIX, T)                                                        \
  extern "C" __global__ void causal_attention_##SUFFIX(                                         \
      T* out, const T* qkv, const unsigned* cu_seqlens, const float* mask, unsigned heads,      \
      unsigned kv_heads, unsigned d, float scale) {                                             \
    causal_attention(out, qkv, cu_seqlens, mask, heads, kv_heads, d, scale);                    \
  }                                                                                             \
  HOPSCORE_ENTRY(causal_attention_##SUFFIX);

CAUSAL_ATTENTION_ENTRY(f32, float)
CAUSAL_ATTENTION_ENTRY(bf16, __nv_bfloat16)
CAUSAL_ATTENTION_ENTRY(f16, __half)
