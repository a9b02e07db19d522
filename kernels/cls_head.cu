// cls_head: a sequence classification head in one launch. Per sequence s of the packed
// batch: its pooled row x_s (the first ([CLS]) row, or with a mask the masked mean of its
// rows, sum_t m_t h_t / max(sum_t m_t, 1)), then optionally the pooler
// p_s = act(W_p x_s + b_p) with act the exact GELU (HF ContextPooler: DeBERTa; the
// entries cls_head_*) or tanh (BertPooler, RobertaClassificationHead; cls_head_tanh_*),
// then the f32 logits W_c p_s + b_c.
// Grid (sequence tiles of kHeadRows, pooler chunks): block (t, k) stages its tile's rows
// in shared memory as f32, computes pooler outputs [k·chunk, (k+1)·chunk) by dense_rows
// (heads.cuh) and their share of the logits, W_c[:, chunk] p_chunk (+ b_c for k = 0),
// into partial logits [chunks][seqs][labels]; the host adds the chunks in order (so
// that a large pooler is spread over the GPU in one launch, deterministically). Without
// a pooler there is one chunk: the logits. Nothing is rounded to T after the hidden
// states.
// CPU twin: src/backend/cpu/cls_head.rs.
#include "heads.cuh"

namespace {

template <typename T, hopscore::HeadAct kPoolerAct>
__device__ void cls_head(const hopscore::HeadParams<T>& p) {
  using hopscore::kHeadRows;
  HOPSCORE_DYNAMIC_SMEM(float, smem);  // x [kHeadRows][hidden], then pooled [kHeadRows][chunk]
  const unsigned s0 = blockIdx.x * kHeadRows;
  const unsigned n = min(kHeadRows, p.rows - s0);
  float* x = smem;
  for (unsigned i = threadIdx.x; i < kHeadRows * p.hidden; i += blockDim.x) {
    const unsigned r = i / p.hidden, c = i % p.hidden;
    float v = 0.0f;
    if (r < n) {
      const unsigned s = s0 + r, start = p.cu_seqlens[s];
      if (p.mask == nullptr) {
        v = hopscore::to_float(p.hidden_states[(size_t)start * p.hidden + c]);
      } else {
        float weight = 0.0f;
        for (unsigned t = start; t < p.cu_seqlens[s + 1]; ++t) {
          const float m = p.mask[t];
          weight += m;
          v += m * hopscore::to_float(p.hidden_states[(size_t)t * p.hidden + c]);
        }
        v /= fmaxf(weight, 1.0f);
      }
    }
    x[i] = v;
  }
  __syncthreads();
  if (p.pooler_w == nullptr) {
    hopscore::dense_rows(p.classifier_w, p.classifier_b, x, p.hidden, p.hidden, p.labels,
                         p.logits + (size_t)s0 * p.labels, p.labels, n, hopscore::HeadAct::kNone);
    return;
  }
  // Pooler outputs j0 .. j0 + width of this block, then their share of the logits.
  const unsigned j0 = blockIdx.y * p.chunk, width = min(p.chunk, p.inner - j0);
  float* pooled = smem + kHeadRows * p.hidden;
  hopscore::dense_rows(p.pooler_w + (size_t)j0 * p.hidden, p.pooler_b != nullptr ? p.pooler_b + j0 : nullptr,
                       x, p.hidden, p.hidden, width, pooled, width, kHeadRows, kPoolerAct);
  __syncthreads();
  hopscore::dense_rows(p.classifier_w + j0, blockIdx.y == 0 ? p.classifier_b : nullptr, pooled, width,
                       p.inner, p.labels, p.logits + ((size_t)blockIdx.y * p.rows + s0) * p.labels,
                       p.labels, n, hopscore::HeadAct::kNone);
}

}  // namespace

#define CLS_HEAD_ENTRY(SUFFIX, T)                                                            \
  extern "C" __global__ void cls_head_##SUFFIX(hopscore::HeadParams<T> p) {              \
    cls_head<T, hopscore::HeadAct::kGeluErf>(p);                                         \
  }                                                                                      \
  HOPSCORE_ENTRY(cls_head_##SUFFIX);                                                     \
  extern "C" __global__ void cls_head_tanh_##SUFFIX(hopscore::HeadParams<T> p) {         \
    cls_head<T, hopscore::HeadAct::kTanh>(p);                                            \
  }                                                                                      \
  HOPSCORE_ENTRY(cls_head_tanh_##SUFFIX);

CLS_HEAD_ENTRY(f32, float)
CLS_HEAD_ENTRY(bf16, __nv_bfloat16)
CLS_HEAD_ENTRY(f16, __half)
