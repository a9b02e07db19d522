// Small row-major ops the layers compose: residual add (x += y) and a row gather (the
// [CLS] rows). CPU twins: CpuBackend::add / gather_rows (src/backend/cpu/mod.rs).
// (Biases are the cuBLASLt GEMM's epilogue: src/backend/cuda/blas.rs.)
#include "common.cuh"

template <typename T>
__device__ void add(T* x, const T* y, unsigned long long n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    x[i] = hopscore::from_float<T>(hopscore::to_float(x[i]) + hopscore::to_float(y[i]));
  }
}

template <typename T>
__device__ void gather_rows(T* out, const T* x, const unsigned* rows, unsigned n, unsigned cols) {
  const unsigned r = blockIdx.x;
  if (r >= n) return;
  const T* src = x + (size_t)rows[r] * cols;
  T* dst = out + (size_t)r * cols;
  for (unsigned c = threadIdx.x; c < cols; c += blockDim.x) dst[c] = src[c];
}

#define ELEMENTWISE_ENTRIES(SUFFIX, T)                                                           \
  extern "C" __global__ void add_##SUFFIX(T* x, const T* y, unsigned long long n) { add(x, y, n); } \
  HOPSCORE_ENTRY(add_##SUFFIX);                                                                 \
  extern "C" __global__ void gather_rows_##SUFFIX(T* out, const T* x, const unsigned* rows,     \
                                                  unsigned n, unsigned cols) {                  \
    gather_rows(out, x, rows, n, cols);                                                         \
  }                                                                                             \
  HOPSCORE_ENTRY(gather_rows_##SUFFIX);

ELEMENTWISE_ENTRIES(f32, float)
ELEMENTWISE_ENTRIES(bf16, __nv_bfloat16)
ELEMENTWISE_ENTRIES(f16, __half)
