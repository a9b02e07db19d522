// rope: rotary position embedding in HF's half-split form (rotate_half), in place on
// the first `heads` heads (head_dim each) of every row of x [rows, cols]: for pair i <
// head_dim/2, (a, b) = (v[i], v[i + d/2]) -> (a·cos − b·sin, b·cos + a·sin) with the
// angle pos·inv_freq[i] taken in f32 (as HF's `freqs`) and the accurate cosf/sinf.
// v2: one warp per row, ROPE_ROWS rows per block. Lane l takes the pairs i = l, l + 32,
// … of every head, so each cos/sin is computed once per (row, i) and each load or store
// of the warp is 32 consecutive elements of one head; the heads go in batches of
// kBatch, all of a batch's loads issued before its first store. No shared memory, no
// barrier (v1: a 128-thread block per row, the row's table built in shared memory).
// rope_qk_norm_<dtype> (v1, Qwen3's `q_norm`/`k_norm`): each head is first RMS-normalised
// over its head_dim (sum of squares in f32, a warp shuffle) and scaled by q_weight (the
// first q_heads heads) or k_weight (the rest), then rotated; a lane holds its pairs of
// one head in registers (head_dim <= 2 * 32 * kMaxPairs: the launcher checks). Its own
// entries, so rope_<dtype> keeps the SASS that ran on hardware.
// CPU twin: src/backend/cpu/rope.rs.
#include "common.cuh"

namespace {
constexpr unsigned kBatch = 4;     // heads whose loads are in flight together
constexpr unsigned kMaxPairs = 4;  // rope_qk_norm: pairs per lane, head_dim <= 256
}

template <typename T>
__device__ void rope(T* x, const unsigned* positions, const float* inv_freq, unsigned rows,
                     unsigned cols, unsigned heads, unsigned head_dim) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;  // whole warp
  const unsigned half = head_dim / 2;
  const float pos = (float)positions[r];
  T* row = x + (size_t)r * cols;
  for (unsigned i = lane; i < half; i += 32) {
    const float angle = pos * inv_freq[i];
    const float c = cosf(angle), s = sinf(angle);
    for (unsigned h0 = 0; h0 < heads; h0 += kBatch) {
      float a[kBatch], b[kBatch];
#pragma unroll
      for (unsigned k = 0; k < kBatch; ++k) {
        if (h0 + k < heads) {
          const T* v = row + (size_t)(h0 + k) * head_dim;
          a[k] = hopscore::to_float(v[i]);
          b[k] = hopscore::to_float(v[i + half]);
        }
      }
#pragma unroll
      for (unsigned k = 0; k < kBatch; ++k) {
        if (h0 + k < heads) {
          T* v = row + (size_t)(h0 + k) * head_dim;
          v[i] = hopscore::from_float<T>(a[k] * c - b[k] * s);
          v[i + half] = hopscore::from_float<T>(b[k] * c + a[k] * s);
        }
      }
    }
  }
}

template <typename T>
__device__ void rope_qk_norm(T* x, const unsigned* positions, const float* inv_freq,
                             const T* q_weight, const T* k_weight, unsigned rows, unsigned cols,
                             unsigned heads, unsigned q_heads, unsigned head_dim, float eps) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (r >= rows) return;  // whole warp
  const unsigned half = head_dim / 2;
  const float pos = (float)positions[r];
  T* row = x + (size_t)r * cols;
  float c[kMaxPairs], s[kMaxPairs];
#pragma unroll
  for (unsigned p = 0; p < kMaxPairs; ++p) {
    const unsigned i = lane + 32 * p;
    const float angle = i < half ? pos * inv_freq[i] : 0.0f;
    c[p] = cosf(angle);
    s[p] = sinf(angle);
  }
  for (unsigned h = 0; h < heads; ++h) {
    T* v = row + (size_t)h * head_dim;
    const T* w = h < q_heads ? q_weight : k_weight;
    float a[kMaxPairs], b[kMaxPairs];
    float ss = 0.0f;
#pragma unroll
    for (unsigned p = 0; p < kMaxPairs; ++p) {
      const unsigned i = lane + 32 * p;
      a[p] = i < half ? hopscore::to_float(v[i]) : 0.0f;
      b[p] = i < half ? hopscore::to_float(v[i + half]) : 0.0f;
      ss += a[p] * a[p] + b[p] * b[p];
    }
    // As the twin: 1 / sqrt(mean + eps), not the approximate rsqrtf.
    const float inv = 1.0f / sqrtf(hopscore::warp_sum(ss) / (float)head_dim + eps);
#pragma unroll
    for (unsigned p = 0; p < kMaxPairs; ++p) {
      const unsigned i = lane + 32 * p;
      if (i < half) {
        const float na = hopscore::to_float(w[i]) * (a[p] * inv);
        const float nb = hopscore::to_float(w[i + half]) * (b[p] * inv);
        v[i] = hopscore::from_float<T>(na * c[p] - nb * s[p]);
        v[i + half] = hopscore::from_float<T>(nb * c[p] + na * s[p]);
      }
    }
  }
}

#define ROPE_ENTRY(SUFFIX, T)                                                                    \
  extern "C" __global__ void rope_##SUFFIX(T* x, const unsigned* positions,                    \
                                           const float* inv_freq, unsigned rows, unsigned cols, \
                                           unsigned heads, unsigned head_dim) {                 \
    rope(x, positions, inv_freq, rows, cols, heads, head_dim);                                  \
  }                                                                                             \
  HOPSCORE_ENTRY(rope_##SUFFIX);                                                                \
  extern "C" __global__ void rope_qk_norm_##SUFFIX(                                             \
      T* x, const unsigned* positions, const float* inv_freq, const T* q_weight,                \
      const T* k_weight, unsigned rows, unsigned cols, unsigned heads, unsigned q_heads,        \
      unsigned head_dim, float eps) {                                                           \
    rope_qk_norm(x, positions, inv_freq, q_weight, k_weight, rows, cols, heads, q_heads,        \
                 head_dim, eps);                                                                \
  }                                                                                             \
  HOPSCORE_ENTRY(rope_qk_norm_##SUFFIX);

ROPE_ENTRY(f32, float)
ROPE_ENTRY(bf16, __nv_bfloat16)
ROPE_ENTRY(f16, __half)
