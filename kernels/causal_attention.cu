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
// are not a multiple of 8 wide); v3 below: mma.sync tensor cores for bf16/f16 (v2, with
// nvcuda::wmma and S, P, O through shared memory, is gone).
// CPU twin: src/backend/cpu/causal_attention.rs.
#include "flash_v3.cuh"
#include "params.cuh"

namespace {
constexpr unsigned BQ = hopscore::geometry::CAUSAL_V1_ROWS;  // query rows per block
constexpr unsigned BK = hopscore::geometry::CAUSAL_V1_KEYS;  // keys per tile
constexpr unsigned TPR = hopscore::geometry::CAUSAL_V1_TPR;  // threads per query row
constexpr unsigned MAX_D = hopscore::geometry::ATTENTION_MAX_D;  // largest head_dim
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

// Rows [row0, row0 + rows) of head h of the context: zeros (a sequence's rows before
// its first query row, which no one reads).
template <typename T>
__device__ void zero_rows(T* out, size_t row0, unsigned rows, unsigned heads, unsigned d, unsigned h) {
  for (unsigned idx = threadIdx.x; idx < rows * d; idx += blockDim.x)
    out[(row0 + idx / d) * heads * d + (size_t)h * d + idx % d] = hopscore::from_float<T>(0.0f);
}

template <typename T>
__device__ void causal_attention(T* out, const T* qkv, const unsigned* cu_seqlens,
                                 const float* mask, const unsigned* first_query, unsigned heads,
                                 unsigned kv_heads, unsigned d, float scale) {
  // qs [BQ][d + 1], kv [BK][d + 1] (keys, then values of the same tile), ps [BQ][BK + 1].
  HOPSCORE_DYNAMIC_SMEM(float, smem);
  const unsigned seq = blockIdx.x, q0 = blockIdx.y * BQ, h = blockIdx.z;
  const unsigned start = cu_seqlens[seq], len = cu_seqlens[seq + 1] - start;
  if (q0 >= len) return;  // whole block: shorter sequence than the longest
  const unsigned first = first_query != nullptr ? first_query[seq] : 0;
  if (q0 + BQ <= first) return zero_rows(out, start + q0, BQ, heads, d, h);
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
  const bool active = i < len && i >= first && m_seq[i] != 0.0f;

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

// v3 for bf16/f16 when head_dim is a multiple of 8 (D = 64 or 128 the padded head
// size; every model here has 64 or 128): the FA2-style tiles of flash_v3.cuh. Grid
// (sequence, 64-row query tile, head), 4 warps of 16 query rows; key tiles of 64 up to
// the diagonal (the last one, where keys past a row are masked), K and V staged by
// cp.async and double-buffered, Q·Kᵀ and P·V on mma_16816 fed by ldmatrix, S, P, O in
// registers. Dynamic shared memory: Q [64][D + 8], K, V [2 stages][2][64][D + 8], all T:
// 640·(D + 8) bytes (45 KB at D = 64, 85 KB at D = 128).
//
// v3.1, for short sequences (LEPUS prompts of ≈ 150–300 tokens are 3–5 query tiles,
// a third to a half of them on a diagonal or past the end): warp w multiplies only the
// diagonal tile's first 16(w + 1) keys, the ones its rows can see (a quarter of the
// tile for warp 0); a warp whose 16 rows are all past the sequence's end only keeps the
// block's staging and barriers; and grid row y takes query tile gridDim.y − 1 − y, so
// the blocks with the most key tiles start first. Skipped keys are ones the mask would
// set to −inf (probability exactly 0), so the bits are v3's.
template <typename T, int D>
__device__ void causal_attention_v3(T* out, const T* qkv, const unsigned* cu_seqlens, const float* mask,
                                    const unsigned* first_query, unsigned heads, unsigned kv_heads, unsigned d,
                                    float scale) {
  using namespace hopscore::flash;
  static_assert(kWarps == 4 && kNb == 8, "the diagonal split below: 4 warps of 16 rows, 64 keys");
  constexpr int LD = ld<D>();
  HOPSCORE_DYNAMIC_SMEM(float, smem);
  // Query tile `diagonal` (its rows' last key tile); the heaviest tiles first.
  const int diagonal = (int)(gridDim.y - 1 - blockIdx.y);
  const int seq = (int)blockIdx.x, i0 = diagonal * kRows, h = (int)blockIdx.z;
  const int start = (int)cu_seqlens[seq], len = (int)cu_seqlens[seq + 1] - start;
  if (i0 >= len) return;  // whole block: shorter sequence than the longest
  const int first = first_query != nullptr ? (int)first_query[seq] : 0;
  if (i0 + kRows <= first) return zero_rows(out, start + i0, kRows, heads, d, h);
  T* qs = reinterpret_cast<T*>(smem);  // [64][LD]
  T* kv = qs + kRows * LD;             // [stage][K, V][64][LD]
  const size_t width = (size_t)(heads + 2 * kv_heads) * d;
  const HeadRows<T> src(qkv + (size_t)start * width, h, heads, kv_heads, d);
  const int lane = (int)threadIdx.x % 32, warp = (int)threadIdx.x / 32, g = lane / 4;

  auto stage_kv = [&](int kt) {
    T* dst = kv + (kt & 1) * 2 * kKeys * LD;
    const size_t row0 = (size_t)kt * kKeys * width;
    stage_rows<T, D>(dst, src.k + row0, len - kt * kKeys, width, (int)d);
    stage_rows<T, D>(dst + kKeys * LD, src.v + row0, len - kt * kKeys, width, (int)d);
  };
  stage_rows<T, D>(qs, src.q + (size_t)i0 * width, len - i0, width, (int)d);
  hopscore::cp_async_commit();
  stage_kv(0);
  hopscore::cp_async_commit();
  hopscore::cp_async_wait<1>();  // the Q tile
  __syncthreads();
  unsigned qf[D / 16][4];
  load_a<D>(qf, qs + 16 * warp * LD, lane);

  const float sl2 = scale * 1.4426950408889634f;  // scale · log2(e)
  Rows16<T, D> rows;
  // Key tile kt, staged: every thread waits for it; the next one is staged unless kt
  // is the diagonal.
  auto staged = [&](int kt) -> const T* {
    hopscore::cp_async_wait<0>();  // tile kt's K and V
    __syncthreads();  // … for every thread; every warp is done with tile kt − 1
    if (kt != diagonal) stage_kv(kt + 1);
    hopscore::cp_async_commit();
    return kv + (kt & 1) * 2 * kKeys * LD;
  };
  // The first NB column blocks of key tile kt at `ks`; on the diagonal tile (j0 = i0)
  // key column c > row r is masked too.
  auto multiply = [&](const T* ks, int kt, bool on_diagonal, auto blocks) {
    constexpr int NB = decltype(blocks)::value;
    float s[NB][4];
    abt<T, D, NB>(s, qf, ks, lane);
    mask_keys(s, key_bits(mask + start, kt * kKeys, len, lane));
    if (on_diagonal) mask_after_diagonal(s, NB / 2 - 1, lane);  // warp NB / 2 − 1 there
    rows.step(s, sl2, ks + kKeys * LD, lane);
  };
  if (16 * warp >= len - i0 || 16 * warp + 16 <= first - i0) {
    // Every row of this warp is past the end or before the first query row: it only
    // keeps the staging and barriers.
    for (int kt = 0; kt <= diagonal; ++kt) staged(kt);
  } else {
    // Key tiles up to the diagonal (i0 < len): the masking only there, out of the loop.
    for (int kt = 0; kt < diagonal; ++kt) multiply(staged(kt), kt, false, Blocks<kNb>{});
    const T* ks = staged(diagonal);
    switch (warp) {  // rows 16w..16w + 15 see the diagonal tile's keys 0..16w + 15
      case 0: multiply(ks, diagonal, true, Blocks<2>{}); break;
      case 1: multiply(ks, diagonal, true, Blocks<4>{}); break;
      case 2: multiply(ks, diagonal, true, Blocks<6>{}); break;
      default: multiply(ks, diagonal, true, Blocks<kNb>{});
    }
  }

  // Rows g and g + 8 of the warp; masked query rows output 0.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int i = i0 + 16 * warp + g + 8 * hh;
    T* row = i < len ? out + (size_t)(start + i) * heads * d + (size_t)h * d : nullptr;
    rows.write(hh, row, i < len && i >= first && mask[start + i] != 0.0f, (int)d, lane);
  }
}

#define CAUSAL_ATTENTION_ENTRY(SUFFIX, T, IMPL, BOUNDS)                                                 \
  extern "C" __global__ void BOUNDS causal_attention_##SUFFIX(const hopscore::CausalAttentionParams<T> p) { \
    IMPL(p.out, p.qkv, p.cu_seqlens, p.mask, p.first_query, p.heads, p.kv_heads, p.d, p.scale);            \
  }                                                                                                        \
  HOPSCORE_ENTRY(causal_attention_##SUFFIX);

// Register budgets of v3: 4 blocks an SM at D = 64 (128 registers; without the bound
// f16 took 130 and fit 3), 2 at D = 128.
#define V3_BOUNDS(D) __launch_bounds__(hopscore::geometry::ATTENTION_THREADS, (D) == 64 ? 4 : 2)

// causal_attention_f32: v1. causal_attention_fma_<T>: v1 for bf16/f16 heads that are
// not a multiple of 8 wide. causal_attention_v3_d<D>_<T>: v3 (separate entries, so that
// each is allocated only its own registers).
CAUSAL_ATTENTION_ENTRY(f32, float, causal_attention, )
CAUSAL_ATTENTION_ENTRY(fma_bf16, __nv_bfloat16, causal_attention, )
CAUSAL_ATTENTION_ENTRY(fma_f16, __half, causal_attention, )
CAUSAL_ATTENTION_ENTRY(v3_d64_bf16, __nv_bfloat16, (causal_attention_v3<__nv_bfloat16, 64>), V3_BOUNDS(64))
CAUSAL_ATTENTION_ENTRY(v3_d128_bf16, __nv_bfloat16, (causal_attention_v3<__nv_bfloat16, 128>), V3_BOUNDS(128))
CAUSAL_ATTENTION_ENTRY(v3_d64_f16, __half, (causal_attention_v3<__half, 64>), V3_BOUNDS(64))
CAUSAL_ATTENTION_ENTRY(v3_d128_f16, __half, (causal_attention_v3<__half, 128>), V3_BOUNDS(128))
