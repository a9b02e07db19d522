// Small row-major ops the layers compose: residual add (x += y), ReLU in place (T5
// v1.0's MLP) and a row gather (the rows of shared-prefix attention and of the LM head). Both move 16-byte vectors when
// the sizes and addresses allow (else elements), with 32-bit indexing.
// CPU twins: CpuBackend::add / relu / gather_rows (src/backend/cpu/mod.rs).
// (Biases are the cuBLASLt GEMM's epilogue: src/backend/cuda/blas.rs.)
#include "common.cuh"

template <typename T>
__device__ void gather_rows(T* out, const T* x, const unsigned* rows, unsigned n, unsigned cols) {
  constexpr unsigned V = hopscore::kVec<T>;
  const unsigned r = blockIdx.x;
  if (r >= n) return;
  const T* src = x + (size_t)rows[r] * cols;
  T* dst = out + (size_t)r * cols;
  if (cols % V == 0 && hopscore::vec_aligned(x) && hopscore::vec_aligned(out)) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (unsigned c = threadIdx.x; c < cols / V; c += blockDim.x) d[c] = s[c];
  } else {
    for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
  }
}

#define ELEMENTWISE_ENTRIES(SUFFIX, T)                                                           \
  extern "C" __global__ void add_##SUFFIX(T* x, const T* y, unsigned n) {                       \
    hopscore::map_inplace(x, y, n, [](float a, float b) { return a + b; });                     \
  }                                                                                             \
  HOPSCORE_ENTRY(add_##SUFFIX);                                                                 \
  extern "C" __global__ void relu_##SUFFIX(T* x, unsigned n) {                                  \
    hopscore::map_inplace(x, (const T*)nullptr, n, [](float a, float) { return fmaxf(a, 0.0f); }); \
  }                                                                                             \
  HOPSCORE_ENTRY(relu_##SUFFIX);                                                                \
  extern "C" __global__ void gather_rows_##SUFFIX(T* out, const T* x, const unsigned* rows,     \
                                                  unsigned n, unsigned cols) {                  \
    gather_rows(out, x, rows, n, cols);                                                         \
  }                                                                                             \
  HOPSCORE_ENTRY(gather_rows_##SUFFIX);

ELEMENTWISE_ENTRIES(f32, float)
ELEMENTWISE_ENTRIES(bf16, __nv_bfloat16)
ELEMENTWISE_ENTRIES(f16, __half)
