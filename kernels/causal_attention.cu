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
// columns of a row). v1: CUDA-core FMAs, head_dim ≤ 128 (f32, and bf16/f16 heads that
// are not a multiple of 16 wide); v2 below: wmma tensor cores for bf16/f16.
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

// The first row of query head `h` and of the key/value head it reads (grouped-query
// attention: kv head = h / (heads / kv_heads)) in a fused [q | k | v] row block.
template <typename T>
struct HeadRows {
  const T *q, *k, *v;
  __device__ HeadRows(const T* base, unsigned h, unsigned heads, unsigned kv_heads, unsigned d) {
    const unsigned g = h / (heads / kv_heads);
    q = base + (size_t)h * d;
    k = base + (size_t)(heads + g) * d;
    v = base + (size_t)(heads + kv_heads + g) * d;
  }
};

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
  const HeadRows<T> src(qkv + (size_t)start * width, h, heads, kv_heads, d);
  const T *qsrc = src.q, *ksrc = src.k, *vsrc = src.v;
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

// v2 for bf16/f16 when head_dim is a multiple of 16: the products Q·Kᵀ and P·V on
// tensor cores through nvcuda::wmma m16n16k16 (16-bit inputs, f32 accumulators). Same
// grid, block (4 warps) and tiles as v1. S = Q·Kᵀ [32 × 32] is one fragment per warp,
// stored to shared memory as f32; the online softmax runs on CUDA cores (TPR threads a
// row), writes P rounded to T (the row sums use the rounded values, so that P·V is
// normalised consistently) and rescales the context O, which lives in shared memory as
// f32 ([32][d + 4]) because fragment rows are opaque; then each warp loads its O
// fragments, adds P·V and stores them back. The K tile's buffer then holds the V tile.
// Shared memory (bytes; every region and every fragment pointer 32-byte aligned):
// Q, K/V [32][d + 8] T, S [32][36] f32, P [32][40] T, O [32][d + 4] f32: 41.5 KB at
// d = 128.
namespace {
constexpr unsigned LDS = BK + 4;  // S row stride (floats)
constexpr unsigned LDP = BK + 8;  // P row stride (elements)
}  // namespace

template <typename T>
__device__ void causal_attention_wmma(T* out, const T* qkv, const unsigned* cu_seqlens,
                                      const float* mask, unsigned heads, unsigned kv_heads,
                                      unsigned d, float scale) {
  using namespace nvcuda;
  typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> FragA;
  typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> FragB;
  typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;
  HOPSCORE_DYNAMIC_SMEM(float, smem);
  const unsigned seq = blockIdx.x, q0 = blockIdx.y * BQ, h = blockIdx.z;
  const unsigned start = cu_seqlens[seq], len = cu_seqlens[seq + 1] - start;
  if (q0 >= len || d % 16 != 0) return;  // whole block (the launcher never sends d % 16)
  const unsigned ldh = d + 8, ldo = d + 4;
  char* base_smem = reinterpret_cast<char*>(smem);
  T* qs = reinterpret_cast<T*>(base_smem);
  T* kvs = qs + BQ * ldh;
  float* ss = reinterpret_cast<float*>(kvs + BK * ldh);
  T* ps = reinterpret_cast<T*>(ss + BQ * LDS);
  float* os = reinterpret_cast<float*>(ps + BQ * LDP);

  const size_t width = (size_t)(heads + 2 * kv_heads) * d;
  const HeadRows<T> src(qkv + (size_t)start * width, h, heads, kv_heads, d);
  const T *qsrc = src.q, *ksrc = src.k, *vsrc = src.v;
  const float* m_seq = mask + start;
  const T zero = hopscore::from_float<T>(0.0f);

  const unsigned tid = threadIdx.x, warp = tid / 32, r = tid / TPR, sub = tid % TPR;
  const unsigned i = q0 + r;
  const bool active = i < len && m_seq[i] != 0.0f;

  for (unsigned idx = tid; idx < BQ * d; idx += blockDim.x) {
    const unsigned rr = idx / d, c = idx % d;
    qs[rr * ldh + c] = q0 + rr < len ? qsrc[(size_t)(q0 + rr) * width + c] : zero;
    os[rr * ldo + c] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const unsigned frags = 2 * (d / 16);  // O fragments: 2 row blocks × d/16 column blocks

  const unsigned kend = min(len, q0 + BQ);
  for (unsigned k0 = 0; k0 < kend; k0 += BK) {
    const unsigned kn = min(BK, len - k0);
    __syncthreads();  // the previous P·V is done with P, V and O (and Q/O are staged)
    for (unsigned idx = tid; idx < BK * d; idx += blockDim.x) {
      const unsigned jj = idx / d, c = idx % d;
      kvs[jj * ldh + c] = jj < kn ? ksrc[(size_t)(k0 + jj) * width + c] : zero;
    }
    __syncthreads();
    {
      const unsigned a = warp / 2, b = warp % 2;
      hopscore::wmma_abt_tile(qs + 16 * a * ldh, kvs + 16 * b * ldh, ldh, d, ss + 16 * a * LDS + 16 * b, LDS);
    }
    __syncthreads();  // S is complete; every warp is done with K
    for (unsigned idx = tid; idx < BK * d; idx += blockDim.x) {
      const unsigned jj = idx / d, c = idx % d;
      kvs[jj * ldh + c] = jj < kn ? vsrc[(size_t)(k0 + jj) * width + c] : zero;
    }
    float sc[KPT];
    float tmax = -INFINITY;
#pragma unroll
    for (unsigned k = 0; k < KPT; ++k) {
      const unsigned jj = sub + TPR * k, j = k0 + jj;
      const bool ok = j <= i && j < len && m_seq[j] != 0.0f;
      sc[k] = ok ? ss[r * LDS + jj] * scale : -INFINITY;
      tmax = fmaxf(tmax, sc[k]);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
    const float mnew = fmaxf(m, tmax);
    const bool any = mnew != -INFINITY;
    const float corr = any ? expf(m - mnew) : 1.0f;
    float psum = 0.0f;
#pragma unroll
    for (unsigned k = 0; k < KPT; ++k) {
      const T p = hopscore::from_float<T>(sc[k] != -INFINITY ? expf(sc[k] - mnew) : 0.0f);
      ps[r * LDP + sub + TPR * k] = p;
      psum += hopscore::to_float(p);
    }
    psum += __shfl_xor_sync(0xffffffffu, psum, 1);
    psum += __shfl_xor_sync(0xffffffffu, psum, 2);
    l = l * corr + psum;
    m = mnew;
    for (unsigned c = sub; c < d; c += TPR) os[r * ldo + c] *= corr;
    __syncthreads();  // P, the rescaled O and the V tile are ready
    for (unsigned f = warp; f < frags; f += blockDim.x / 32) {
      const unsigned a = f / (d / 16), b = f % (d / 16);
      FragC acc;
      wmma::load_matrix_sync(acc, os + 16 * a * ldo + 16 * b, ldo, wmma::mem_row_major);
#pragma unroll
      for (unsigned kk = 0; kk < BK; kk += 16) {
        FragA fa;
        FragB fb;
        wmma::load_matrix_sync(fa, ps + 16 * a * LDP + kk, LDP);
        wmma::load_matrix_sync(fb, kvs + kk * ldh + 16 * b, ldh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(os + 16 * a * ldo + 16 * b, acc, ldo, wmma::mem_row_major);
    }
  }
  __syncthreads();  // O is final
  if (i < len) {
    T* o = out + (size_t)(start + i) * heads * d + (size_t)h * d;
    const float inv = active ? 1.0f / l : 0.0f;
    for (unsigned c = sub; c < d; c += TPR)
      o[c] = hopscore::from_float<T>(active ? os[r * ldo + c] * inv : 0.0f);
  }
}

#define CAUSAL_ATTENTION_ENTRY(SUFFIX, T, IMPL)                                                        \
  extern "C" __global__ void causal_attention_##SUFFIX(                                         \
      T* out, const T* qkv, const unsigned* cu_seqlens, const float* mask, unsigned heads,      \
      unsigned kv_heads, unsigned d, float scale) {                                             \
    IMPL(out, qkv, cu_seqlens, mask, heads, kv_heads, d, scale);                                \
  }                                                                                             \
  HOPSCORE_ENTRY(causal_attention_##SUFFIX);

// causal_attention_<T>: v1 for f32, v2 (wmma; head_dim a multiple of 16) for bf16/f16.
// causal_attention_fma_<T>: v1 for bf16/f16 heads of other sizes. Separate entries, so
// that the wmma kernel is not allocated the v1 accumulators' registers.
CAUSAL_ATTENTION_ENTRY(f32, float, causal_attention)
CAUSAL_ATTENTION_ENTRY(bf16, __nv_bfloat16, causal_attention_wmma)
CAUSAL_ATTENTION_ENTRY(f16, __half, causal_attention_wmma)
CAUSAL_ATTENTION_ENTRY(fma_bf16, __nv_bfloat16, causal_attention)
CAUSAL_ATTENTION_ENTRY(fma_f16, __half, causal_attention)
