// token_head: a token classification head in one launch. Per token t: the f32 logits
// W h_t + b and the label argmax_l logit_l (ties to the lowest label, as torch.argmax;
// the argmax of the softmax). A block takes kHeadRows tokens: their rows staged in
// shared memory as f32 by 16-byte vectors, the layer by dense_rows (heads.cuh), the
// logits through shared memory to the argmax.
// CPU twin: src/backend/cpu/token_head.rs.
#include "heads.cuh"

namespace {

template <typename T> __device__ void token_head(const hopscore::HeadParams<T>& p) {
  using hopscore::kHeadRows;
  constexpr unsigned V = hopscore::kVec<T>;
  HOPSCORE_DYNAMIC_SMEM(float, smem);  // x [kHeadRows][hidden], then logits [kHeadRows][labels]
  const unsigned t0 = blockIdx.x * kHeadRows;
  const unsigned n = min(kHeadRows, p.rows - t0);
  const T* src = p.hidden_states + (size_t)t0 * p.hidden;
  float* x = smem;
  if (p.hidden % V == 0 && hopscore::vec_aligned(p.hidden_states)) {
    for (unsigned i = threadIdx.x * V; i < n * p.hidden; i += blockDim.x * V) {
      float v[V];
      hopscore::load_vec(src + i, v);
#pragma unroll
      for (unsigned k = 0; k < V; ++k) x[i + k] = v[k];
    }
  } else {
    for (unsigned i = threadIdx.x; i < n * p.hidden; i += blockDim.x) x[i] = hopscore::to_float(src[i]);
  }
  for (unsigned i = n * p.hidden + threadIdx.x; i < kHeadRows * p.hidden; i += blockDim.x) x[i] = 0.0f;
  __syncthreads();
  float* logits = smem + kHeadRows * p.hidden;
  hopscore::dense_rows(p.classifier_w, p.classifier_b, x, p.hidden, p.hidden, p.labels, logits,
                       p.labels, n, hopscore::HeadAct::kNone);
  __syncthreads();
  for (unsigned i = threadIdx.x; i < n * p.labels; i += blockDim.x) {
    p.logits[(size_t)t0 * p.labels + i] = logits[i];
  }
  if (threadIdx.x < n) {
    const float* l = logits + threadIdx.x * p.labels;
    unsigned best = 0;
    for (unsigned k = 1; k < p.labels; ++k) best = l[k] > l[best] ? k : best;
    p.label[t0 + threadIdx.x] = best;
  }
}

}  // namespace

#define TOKEN_HEAD_ENTRY(SUFFIX, T)                                                              \
  extern "C" __global__ void token_head_##SUFFIX(hopscore::HeadParams<T> p) { token_head(p); } \
  HOPSCORE_ENTRY(token_head_##SUFFIX);

TOKEN_HEAD_ENTRY(f32, float)
TOKEN_HEAD_ENTRY(bf16, __nv_bfloat16)
TOKEN_HEAD_ENTRY(f16, __half)
