// question_loglik: log-probabilities of target tokens under the LM head, evaluated only
// at the requested hidden rows and without materialising [rows, vocab] logits:
// logp[r] = z[r, t_r] − logsumexp_v z[r, v], z = (hidden[rows[r]] · headᵀ) / temperature.
//
// question_loglik_<T>: grid (row tiles of RT, vocabulary splits of split_width). A block
// sweeps its split in chunks of VC vocabulary rows: the [RT × VC] logits of a chunk are
// an FMA tile product over KC-wide column slices staged in shared memory (f32), then
// every row's running (max, sum of exp) is updated (online log-sum-exp) and the target
// logit kept when it falls in the chunk. Each split writes its partials to
// part[3][splits][n] (max, sum, target logit or −inf).
// f32 uses CUDA-core FMAs (RT = 16 rows, VC = 64 words per chunk). bf16/f16 (v3) use
// tensor cores through mma_16816 + ldmatrix with f32 accumulators: RT_TC = 32 rows,
// VC_TC = 128 words per chunk (16 words per warp), the slices staged by cp.async in the
// element type and double-buffered; the same online log-sum-exp then runs on the f32
// logit tile (v2, nvcuda::wmma, is gone).
// question_loglik_merge: one thread per row merges the splits by log-sum-exp (the sum
// in f64, as the twin merges its chunks).
// CPU twin: src/backend/cpu/question_loglik.rs.
#include "common.cuh"
#include "geometry.cuh"
#include "params.cuh"

namespace {
constexpr unsigned RT = hopscore::geometry::LOGLIK_ROWS;  // hidden rows per block
constexpr unsigned VC = 64;       // vocabulary rows per chunk
constexpr unsigned KC = 64;       // columns per staged slice
constexpr unsigned THREADS = hopscore::geometry::LOGLIK_THREADS;  // VC · RT / 4: 4 logits per thread
constexpr unsigned RPT = RT * VC / THREADS;
constexpr unsigned WARPS = THREADS / 32;
constexpr unsigned RPW = RT / WARPS;  // rows whose running state a warp keeps
}  // namespace

template <typename T>
__device__ void question_loglik(float* part, const T* hidden, const unsigned* rows,
                                const T* head, const unsigned* targets, unsigned n,
                                unsigned cols, unsigned vocab, unsigned split_width,
                                float inv_t) {
  __shared__ float hs[RT][KC + 1];
  __shared__ float ws[VC][KC + 1];
  __shared__ float zs[RT][VC + 1];
  __shared__ float tgt[RT];
  const unsigned r0 = blockIdx.x * RT, split = blockIdx.y, splits = gridDim.y;
  const unsigned v_begin = split * split_width;
  const unsigned v_end = min(vocab, v_begin + split_width);
  const unsigned tid = threadIdx.x, j = tid % VC, rg = tid / VC;
  const unsigned warp = tid / 32, lane = tid % 32;
  if (tid < RT) tgt[tid] = -INFINITY;

  float run_m[RPW], run_s[RPW];
#pragma unroll
  for (unsigned q = 0; q < RPW; ++q) {
    run_m[q] = -INFINITY;
    run_s[q] = 0.0f;
  }

  for (unsigned v0 = v_begin; v0 < v_end; v0 += VC) {
    float acc[RPT];
#pragma unroll
    for (unsigned q = 0; q < RPT; ++q) acc[q] = 0.0f;
    for (unsigned k0 = 0; k0 < cols; k0 += KC) {
      __syncthreads();  // the previous slice (and the previous chunk's zs) is consumed
      for (unsigned idx = tid; idx < RT * KC; idx += THREADS) {
        const unsigned rr = idx / KC, kk = idx % KC, c = k0 + kk;
        hs[rr][kk] = r0 + rr < n && c < cols
                         ? hopscore::to_float(hidden[(size_t)rows[r0 + rr] * cols + c])
                         : 0.0f;
      }
      for (unsigned idx = tid; idx < VC * KC; idx += THREADS) {
        const unsigned jj = idx / KC, kk = idx % KC, c = k0 + kk;
        ws[jj][kk] = v0 + jj < v_end && c < cols
                         ? hopscore::to_float(head[(size_t)(v0 + jj) * cols + c])
                         : 0.0f;
      }
      __syncthreads();
#pragma unroll 8
      for (unsigned kk = 0; kk < KC; ++kk) {
        const float w = ws[j][kk];
#pragma unroll
        for (unsigned q = 0; q < RPT; ++q) acc[q] += hs[rg * RPT + q][kk] * w;
      }
    }
    const unsigned v = v0 + j;
#pragma unroll
    for (unsigned q = 0; q < RPT; ++q) {
      const unsigned rr = rg * RPT + q;
      const float z = acc[q] * inv_t;
      zs[rr][j] = v < v_end ? z : -INFINITY;
      if (v < v_end && r0 + rr < n && targets[r0 + rr] == v) tgt[rr] = z;
    }
    __syncthreads();
#pragma unroll
    for (unsigned q = 0; q < RPW; ++q) {
      const unsigned rr = warp + WARPS * q;
      const float a = zs[rr][lane], b = zs[rr][lane + 32];
      // Column 0 of a chunk is always in the vocabulary: cmax is finite.
      const float cmax = hopscore::warp_max(fmaxf(a, b));
      const float mnew = fmaxf(run_m[q], cmax);
      const float s = hopscore::warp_sum(expf(a - mnew) + expf(b - mnew));
      run_s[q] = run_s[q] * expf(run_m[q] - mnew) + s;
      run_m[q] = mnew;
    }
  }
  __syncthreads();  // tgt is final
  if (lane == 0) {
#pragma unroll
    for (unsigned q = 0; q < RPW; ++q) {
      const unsigned rr = warp + WARPS * q, r = r0 + rr;
      if (r < n) {
        part[(size_t)split * n + r] = run_m[q];
        part[(size_t)(splits + split) * n + r] = run_s[q];
        part[(size_t)(2 * splits + split) * n + r] = tgt[rr];
      }
    }
  }
}

namespace {
constexpr unsigned RT_TC = hopscore::geometry::LOGLIK_TC_ROWS;  // hidden rows per block (two 16-row fragments)
constexpr unsigned VC_TC = hopscore::geometry::LOGLIK_TC_WORDS;  // vocabulary rows per chunk (16 per warp)
constexpr unsigned KC_TC = hopscore::geometry::LOGLIK_TC_COLS;  // columns per staged slice (four k-steps)
constexpr unsigned LDT = hopscore::geometry::LOGLIK_TC_LD;  // staged row stride (elements; 144 bytes)
constexpr unsigned LDZ = hopscore::geometry::LOGLIK_TC_LDZ;  // logit tile row stride (floats)
constexpr unsigned RPW_TC = RT_TC / WARPS;  // rows whose running state a warp keeps
constexpr unsigned CPL = VC_TC / 32;      // logit columns per lane in the row pass
}  // namespace

// Rows [0, nrows) of a staged slice (`dst`, stride LDT) ← columns k0..k0+64 of the rows
// `row(i)` of a [*, cols] matrix (zero past `valid` rows and past column `cols`), as
// 16-byte cp.async chunks when the rows are 16-byte aligned (cols % 8 = 0), element by
// element otherwise.
template <typename T, typename Row>
__device__ __forceinline__ void stage_slice(T* dst, const T* src, unsigned nrows, unsigned valid, unsigned cols,
                                            unsigned k0, Row row) {
  constexpr unsigned chunks = KC_TC / 8;
  if (cols % 8 == 0) {
    for (unsigned e = threadIdx.x; e < nrows * chunks; e += THREADS) {
      const unsigned r = e / chunks, c = k0 + 8 * (e % chunks);
      const bool ok = r < valid && c < cols;
      hopscore::cp_async_16(dst + r * LDT + 8 * (e % chunks), ok ? src + (size_t)row(r) * cols + c : src,
                            ok ? 16 : 0);
    }
  } else {
    const T zero = hopscore::from_float<T>(0.0f);
    for (unsigned e = threadIdx.x; e < nrows * KC_TC; e += THREADS) {
      const unsigned r = e / KC_TC, kk = e % KC_TC, c = k0 + kk;
      dst[r * LDT + kk] = r < valid && c < cols ? src[(size_t)row(r) * cols + c] : zero;
    }
  }
}

// v3 of the bf16/f16 logit tiles: the [32 × 128] tile of a chunk is mma_16816 (f32
// accumulators) fed by ldmatrix; warp w owns vocabulary rows 16w..16w+15 of the chunk
// (two 8-word blocks) for both 16-row halves. The hidden and head slices are staged by
// cp.async, double-buffered over the (chunk, slice) steps of the split, so that the next
// slice loads while this one multiplies; each chunk's logits go through shared memory
// (f32) to the same online log-sum-exp as before. Dynamic shared memory: hidden
// [2][32][LDT] and head [2][128][LDT] slices (T), logits [32][LDZ] (f32): 63,488 bytes.
template <typename T>
__device__ void question_loglik_tc(float* part, const T* hidden, const unsigned* rows,
                                   const T* head, const unsigned* targets, unsigned n,
                                   unsigned cols, unsigned vocab, unsigned split_width,
                                   float inv_t) {
  HOPSCORE_DYNAMIC_SMEM(float, smem);
  T* hs = reinterpret_cast<T*>(smem);    // [2][RT_TC][LDT]
  T* ws = hs + 2 * RT_TC * LDT;           // [2][VC_TC][LDT]
  float* zs = reinterpret_cast<float*>(ws + 2 * VC_TC * LDT);  // [RT_TC][LDZ]
  __shared__ float tgt[RT_TC];
  const unsigned r0 = blockIdx.x * RT_TC, split = blockIdx.y, splits = gridDim.y;
  const unsigned v_begin = split * split_width;
  const unsigned v_end = min(vocab, v_begin + split_width);
  const unsigned tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const unsigned g = lane / 4, t = lane % 4;
  if (tid < RT_TC) tgt[tid] = -INFINITY;

  float run_m[RPW_TC], run_s[RPW_TC];
  unsigned want[RPW_TC];
#pragma unroll
  for (unsigned q = 0; q < RPW_TC; ++q) {
    run_m[q] = -INFINITY;
    run_s[q] = 0.0f;
    const unsigned r = r0 + warp + WARPS * q;
    want[q] = r < n ? targets[r] : 0xffffffffu;
  }

  // Step i = (chunk i / slices, slice i % slices) of the split.
  const unsigned slices = (cols + KC_TC - 1) / KC_TC;
  const unsigned steps = (v_end - v_begin + VC_TC - 1) / VC_TC * slices;
  const unsigned valid_rows = n - r0 < RT_TC ? n - r0 : RT_TC;
  auto stage = [&](unsigned i) {
    const unsigned v0 = v_begin + i / slices * VC_TC, k0 = i % slices * KC_TC, buf = i & 1;
    stage_slice(hs + buf * RT_TC * LDT, hidden, RT_TC, valid_rows, cols, k0,
                [&](unsigned r) { return rows[r0 + r]; });
    stage_slice(ws + buf * VC_TC * LDT, head, VC_TC, v_end - v0 < VC_TC ? v_end - v0 : VC_TC, cols, k0,
                [&](unsigned r) { return v0 + r; });
    hopscore::cp_async_commit();
  };
  stage(0);

  float acc[2][2][4];  // [16-row half][8-word block][fragment]
  for (unsigned i = 0; i < steps; ++i) {
    const unsigned buf = i & 1, v0 = v_begin + i / slices * VC_TC;
    hopscore::cp_async_wait<0>();  // step i's slices
    __syncthreads();  // … for every thread; every warp is done with step i − 1's buffer
    if (i + 1 < steps) stage(i + 1);
    if (i % slices == 0) {
#pragma unroll
      for (unsigned mt = 0; mt < 2; ++mt)
#pragma unroll
        for (unsigned nb = 0; nb < 2; ++nb)
#pragma unroll
          for (unsigned e = 0; e < 4; ++e) acc[mt][nb][e] = 0.0f;
    }
    const T* h = hs + buf * RT_TC * LDT;
    const T* w = ws + (buf * VC_TC + 16 * warp) * LDT;
#pragma unroll
    for (unsigned ks = 0; ks < KC_TC / 16; ++ks) {
      // B(k, v) = W[v, k]: two 8-word blocks of the staged W rows per ldmatrix_x4.
      unsigned b[4];
      hopscore::ldmatrix_x4(b, w + (lane % 8 + 8 * (lane / 16)) * LDT + 16 * ks + 8 * ((lane / 8) % 2));
      const unsigned b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
#pragma unroll
      for (unsigned mt = 0; mt < 2; ++mt) {
        unsigned a[4];
        hopscore::ldmatrix_x4(a, h + (16 * mt + lane % 16) * LDT + 16 * ks + 8 * (lane / 16));
        hopscore::mma_16816<T>(acc[mt][0], a, b0);
        hopscore::mma_16816<T>(acc[mt][1], a, b1);
      }
    }
    if (i % slices != slices - 1) continue;  // the chunk's logits are not complete yet

    // Logits of the chunk → zs (rows 16mt + g (+8), words 16w + 8nb + 2t, + 1).
#pragma unroll
    for (unsigned mt = 0; mt < 2; ++mt)
#pragma unroll
      for (unsigned nb = 0; nb < 2; ++nb) {
        float* z = zs + (16 * mt + g) * LDZ + 16 * warp + 8 * nb + 2 * t;
        *reinterpret_cast<float2*>(z) = make_float2(acc[mt][nb][0], acc[mt][nb][1]);
        *reinterpret_cast<float2*>(z + 8 * LDZ) = make_float2(acc[mt][nb][2], acc[mt][nb][3]);
      }
    __syncthreads();
#pragma unroll
    for (unsigned q = 0; q < RPW_TC; ++q) {
      const unsigned rr = warp + WARPS * q;
      float z[CPL];
      float cmax = -INFINITY;
#pragma unroll
      for (unsigned c = 0; c < CPL; ++c) {
        const unsigned col = lane + 32 * c, v = v0 + col;
        z[c] = v < v_end ? zs[rr * LDZ + col] * inv_t : -INFINITY;
        if (v < v_end && v == want[q]) tgt[rr] = z[c];
        cmax = fmaxf(cmax, z[c]);
      }
      // Column 0 of a chunk is always in the vocabulary: the chunk max is finite.
      cmax = hopscore::warp_max(cmax);
      const float mnew = fmaxf(run_m[q], cmax);
      float e = 0.0f;
#pragma unroll
      for (unsigned c = 0; c < CPL; ++c) e += expf(z[c] - mnew);
      run_s[q] = run_s[q] * expf(run_m[q] - mnew) + hopscore::warp_sum(e);
      run_m[q] = mnew;
    }
  }
  __syncthreads();  // tgt is final
  if (lane == 0) {
#pragma unroll
    for (unsigned q = 0; q < RPW_TC; ++q) {
      const unsigned rr = warp + WARPS * q, r = r0 + rr;
      if (r < n) {
        part[(size_t)split * n + r] = run_m[q];
        part[(size_t)(splits + split) * n + r] = run_s[q];
        part[(size_t)(2 * splits + split) * n + r] = tgt[rr];
      }
    }
  }
}

#define QUESTION_LOGLIK_ENTRY(SUFFIX, T, IMPL)                                                         \
  extern "C" __global__ void question_loglik_##SUFFIX(const hopscore::QuestionLoglikParams<T> p) { \
    IMPL(p.part, p.hidden, p.rows, p.head, p.targets, p.n, p.cols, p.vocab, p.split_width, p.inv_t); \
  }                                                                                                  \
  HOPSCORE_ENTRY(question_loglik_##SUFFIX);

QUESTION_LOGLIK_ENTRY(f32, float, question_loglik)
QUESTION_LOGLIK_ENTRY(bf16, __nv_bfloat16, question_loglik_tc)
QUESTION_LOGLIK_ENTRY(f16, __half, question_loglik_tc)

extern "C" __global__ void question_loglik_merge(float* out, const float* part, unsigned n,
                                                 unsigned splits) {
  const unsigned r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= n) return;
  float m = -INFINITY, t = -INFINITY;
  for (unsigned s = 0; s < splits; ++s) {
    m = fmaxf(m, part[(size_t)s * n + r]);
    t = fmaxf(t, part[(size_t)(2 * splits + s) * n + r]);
  }
  double sum = 0.0;
  for (unsigned s = 0; s < splits; ++s) {
    const float ms = part[(size_t)s * n + r];
    sum += (double)part[(size_t)(splits + s) * n + r] * exp((double)(ms - m));
  }
  out[r] = t - m - (float)log(sum);
}
HOPSCORE_ENTRY(question_loglik_merge);
