// rope: rotary position embedding in HF's half-split form (rotate_half), in place on
// the first `heads` heads (head_dim each) of every row of x [rows, cols]: for pair i <
// head_dim/2, (a, b) = (v[i], v[i + d/2]) -> (a·cos − b·sin, b·cos + a·sin) with the
// angle pos·inv_freq[i] taken in f32 (as HF's `freqs`) and the accurate cosf/sinf.
// v2: one warp per row, ROPE_ROWS rows per block. Lane l takes the pairs i = l, l + 32,
// … of every head, so each cos/sin is computed once per (row, i) and each load or store
// of the warp is 32 consecutive elements of one head; the heads go in batches of
// kBatch, all of a batch's loads issued before its first store. No shared memory, no
// barrier (v1: a 128-thread block per row, the row's table built in shared memory).
// CPU twin: src/backend/cpu/rope.rs.
#include "common.cuh"

namespace {
constexpr unsigned kBatch = 4;  // heads whose loads are in flight together
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

#define ROPE_ENTRY(SUFFIX, T)                                                                    \
  extern "C" __global__ void rope_##SUFFIX(T* x, const unsigned* positions,                    \
                                           const float* inv_freq, unsigned rows, unsigned cols, \
                                           unsigned heads, unsigned head_dim) {                 \
    rope(x, positions, inv_freq, rows, cols, heads, head_dim);                                  \
  }                                                                                             \
  HOPSCORE_ENTRY(rope_##SUFFIX);

ROPE_ENTRY(f32, float)
ROPE_ENTRY(bf16, __nv_bfloat16)
ROPE_ENTRY(f16, __half)
