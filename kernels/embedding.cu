// embedding: out[t] = sum_k table_k[ids_k[t]] over up to three tables (word, position,
// token type; unused slots are nullptr), summed in f32; scale_rows: x[r] *= scale[r]
// (the embedding mask). Row-major [tokens, cols]; one block per token.
// CPU twin: src/backend/cpu/embedding.rs.
#include "common.cuh"

template <typename T>
__device__ void embedding(T* out, const T* t0, const unsigned* i0, const T* t1, const unsigned* i1,
                          const T* t2, const unsigned* i2, unsigned tokens, unsigned cols) {
  const unsigned t = blockIdx.x;
  if (t >= tokens) return;
  const T* r0 = t0 + (size_t)i0[t] * cols;
  const T* r1 = t1 != nullptr ? t1 + (size_t)i1[t] * cols : nullptr;
  const T* r2 = t2 != nullptr ? t2 + (size_t)i2[t] * cols : nullptr;
  T* o = out + (size_t)t * cols;
  for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = hopscore::to_float(r0[c]);
    if (r1 != nullptr) v += hopscore::to_float(r1[c]);
    if (r2 != nullptr) v += hopscore::to_float(r2[c]);
    o[c] = hopscore::from_float<T>(v);
  }
}

template <typename T>
__device__ void scale_rows(T* x, const float* scale, unsigned rows, unsigned cols) {
  const size_t n = (size_t)rows * cols;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    x[i] = hopscore::from_float<T>(hopscore::to_float(x[i]) * scale[i / cols]);
  }
}

#define EMBEDDING_ENTRIES(SUFFIX, T)                                                             \
  extern "C" __global__ void embedding_##SUFFIX(T* out, const T* t0, const unsigned* i0,        \
                                                const T* t1, const unsigned* i1, const T* t2,   \
                                                const unsigned* i2, unsigned tokens,            \
                                                unsigned cols) {                                \
    embedding(out, t0, i0, t1, i1, t2, i2, tokens, cols);                                       \
  }                                                                                             \
  HOPSCORE_ENTRY(embedding_##SUFFIX);                                                           \
  extern "C" __global__ void scale_rows_##SUFFIX(T* x, const float* scale, unsigned rows,       \
                                                 unsigned cols) {                               \
    scale_rows(x, scale, rows, cols);                                                           \
  }                                                                                             \
  HOPSCORE_ENTRY(scale_rows_##SUFFIX);

EMBEDDING_ENTRIES(f32, float)
EMBEDDING_ENTRIES(bf16, __nv_bfloat16)
EMBEDDING_ENTRIES(f16, __half)
