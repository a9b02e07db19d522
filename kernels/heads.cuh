// The dense layer of the classification-head kernels (cls_head.cu, token_head.cu): a
// block holds kHeadRows input rows as f32 in shared memory and applies a small
// [out, in] layer to all of them, reading each weight row once.
#pragma once
#include "common.cuh"
#include "params.cuh"

namespace hopscore {

// Threads per block of the head kernels (8 warps).
constexpr unsigned kHeadThreads = geometry::HEAD_THREADS;

// The activation a dense_rows output goes through: none (a classifier), the exact GELU
// (HF ContextPooler: DeBERTa) or tanh (BertPooler, RobertaClassificationHead), in f32.
// A compile-time argument of each entry (cls_head_* and cls_head_tanh_*), so an entry's
// code holds its own activation only.
enum class HeadAct : unsigned { kGeluErf, kTanh, kNone };

__device__ inline float head_act(HeadAct act, float v) {
  switch (act) {
    case HeadAct::kGeluErf: return gelu_erf(v);
    case HeadAct::kTanh: return tanhf(v);
    default: return v;
  }
}

// y[r][j] = act(w[j] · x[r] + b[j]) for r < rows, j < out; w has rows of ld elements
// (the first `in` read), x is [kHeadRows][in] f32 in shared memory, y has rows of
// y_stride floats. Warp k takes j = k, k + warps, …; each lane reads its slices of
// w[j] once (16-byte vectors when in is a multiple of kVec<T> and the row is aligned)
// for all kHeadRows rows; f32 accumulation, warp_sum.
template <typename T>
__device__ void dense_rows(const T* w, const T* b, const float* x, unsigned in, unsigned ld,
                           unsigned out, float* y, unsigned y_stride, unsigned rows, HeadAct act) {
  constexpr unsigned V = kVec<T>;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (unsigned j = warp; j < out; j += warps) {
    const T* wj = w + (size_t)j * ld;
    float acc[kHeadRows] = {};
    if (in % V == 0 && vec_aligned(wj)) {
      for (unsigned c = lane * V; c < in; c += 32 * V) {
        float v[V];
        load_vec(wj + c, v);
#pragma unroll
        for (unsigned r = 0; r < kHeadRows; ++r)
#pragma unroll
          for (unsigned i = 0; i < V; ++i) acc[r] += v[i] * x[r * in + c + i];
      }
    } else {
      for (unsigned c = lane; c < in; c += 32) {
        const float v = to_float(wj[c]);
#pragma unroll
        for (unsigned r = 0; r < kHeadRows; ++r) acc[r] += v * x[r * in + c];
      }
    }
    const float bias = b != nullptr ? to_float(b[j]) : 0.0f;
#pragma unroll
    for (unsigned r = 0; r < kHeadRows; ++r) {
      const float v = warp_sum(acc[r]) + bias;
      if (lane == 0 && r < rows) y[r * y_stride + j] = head_act(act, v);
    }
  }
}

}  // namespace hopscore
