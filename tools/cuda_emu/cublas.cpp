// hopscore CUDA CPU emulator: a fake cuBLAS (libcublas.so) for cudarc's
// `dynamic-loading`. Device pointers are host addresses (see driver.cpp); every call is
// synchronous. GEMMs follow column-major BLAS semantics, accumulate in float (double
// for CUBLAS_COMPUTE_64F) and round the output to its type to nearest even.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "halfbits.h"

typedef int cublasStatus_t;
typedef void* cudaStream_t;

namespace {

enum : int {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum : int { CUDA_R_32F = 0, CUDA_R_64F = 1, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum : int {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_16F_PEDANTIC = 65,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_64F_PEDANTIC = 71,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};

struct Handle {
  cudaStream_t stream = nullptr;
  int pointer_mode = 0;  // HOST
  int math_mode = 0;
};


bool type_ok(int t) { return t == CUDA_R_32F || t == CUDA_R_64F || t == CUDA_R_16F || t == CUDA_R_16BF; }

template <typename Acc> inline Acc load(const void* p, int type, size_t i) {
  switch (type) {
    case CUDA_R_32F: return Acc(static_cast<const float*>(p)[i]);
    case CUDA_R_64F: return Acc(static_cast<const double*>(p)[i]);
    case CUDA_R_16F: return Acc(f16_to_f32(static_cast<const uint16_t*>(p)[i]));
    default: return Acc(bf16_to_f32(static_cast<const uint16_t*>(p)[i]));
  }
}
template <typename Acc> inline void store(void* p, int type, size_t i, Acc v) {
  switch (type) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = float(v); break;
    case CUDA_R_64F: static_cast<double*>(p)[i] = double(v); break;
    case CUDA_R_16F: static_cast<uint16_t*>(p)[i] = f32_to_f16(float(v)); break;
    default: static_cast<uint16_t*>(p)[i] = f32_to_bf16(float(v)); break;
  }
}

// C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C, all column-major.
template <typename Acc>
void gemm(bool ta, bool tb, int m, int n, int k, Acc alpha, const void* A, int at, int lda, const void* B, int bt,
          int ldb, Acc beta, void* C, int ct, int ldc) {
  // op(A) as rows of length k (a[i*k + l]), op(B) as columns of length k (b[j*k + l]).
  std::vector<Acc> a((size_t)m * k), b((size_t)n * k);
  for (int i = 0; i < m; ++i)
    for (int l = 0; l < k; ++l) a[(size_t)i * k + l] = load<Acc>(A, at, ta ? (size_t)i * lda + l : (size_t)l * lda + i);
  for (int j = 0; j < n; ++j)
    for (int l = 0; l < k; ++l) b[(size_t)j * k + l] = load<Acc>(B, bt, tb ? (size_t)l * ldb + j : (size_t)j * ldb + l);
  auto columns = [&](int j0, int j1) {
    for (int j = j0; j < j1; ++j) {
      const Acc* bj = &b[(size_t)j * k];
      for (int i = 0; i < m; ++i) {
        const Acc* ai = &a[(size_t)i * k];
        // 8 independent partial sums (vectorisable), then a fixed pairwise combination.
        Acc p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int l = 0;
        for (; l + 8 <= k; l += 8)
          for (int u = 0; u < 8; ++u) p[u] += ai[l + u] * bj[l + u];
        for (int u = 0; l < k; ++l, ++u) p[u] += ai[l] * bj[l];
        const Acc s = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
        const size_t ci = (size_t)j * ldc + i;
        Acc v = alpha * s;
        if (beta != Acc(0)) v += beta * load<Acc>(C, ct, ci);  // beta == 0: C is not read (may hold NaN)
        store<Acc>(C, ct, ci, v);
      }
    }
  };
  const double work = double(m) * n * k;
  unsigned threads = std::min<unsigned>(std::max(1u, std::thread::hardware_concurrency()), 8);
  if (work < 4e6 || threads <= 1 || n < 2) {
    columns(0, n);
    return;
  }
  threads = std::min<unsigned>(threads, unsigned(n));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    const int j0 = int((long long)n * t / threads), j1 = int((long long)n * (t + 1) / threads);
    pool.emplace_back(columns, j0, j1);
  }
  for (auto& th : pool) th.join();
}

cublasStatus_t gemm_any(void* h, int transa, int transb, int m, int n, int k, const void* alpha, const void* A,
                        int at, int lda, long long sa, const void* B, int bt, int ldb, long long sb, const void* beta,
                        void* C, int ct, int ldc, long long sc, int batch, int compute) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (transa < 0 || transa > 2 || transb < 0 || transb > 2) return CUBLAS_STATUS_INVALID_VALUE;
  if (!type_ok(at) || !type_ok(bt) || !type_ok(ct)) {
    fprintf(stderr, "cuda_emu cublas: unsupported data types A=%d B=%d C=%d\n", at, bt, ct);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const bool ta = transa != 0, tb = transb != 0;
  if (lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m)) {
    fprintf(stderr, "cuda_emu cublas: bad leading dimension (m=%d n=%d k=%d lda=%d ldb=%d ldc=%d ta=%d tb=%d)\n", m,
            n, k, lda, ldb, ldc, transa, transb);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (static_cast<const Handle*>(h)->pointer_mode != 0) {
    // Device pointer mode: device memory is host memory here, so the read is the same.
  }
  auto esize = [](int t) { return t == CUDA_R_64F ? 8 : (t == CUDA_R_32F ? 4 : 2); };
  for (int bi = 0; bi < batch; ++bi) {
    const char* a = static_cast<const char*>(A) + (long long)bi * sa * esize(at);
    const char* b = static_cast<const char*>(B) + (long long)bi * sb * esize(bt);
    char* c = static_cast<char*>(C) + (long long)bi * sc * esize(ct);
    switch (compute) {
      case CUBLAS_COMPUTE_64F:
      case CUBLAS_COMPUTE_64F_PEDANTIC:
        gemm<double>(ta, tb, m, n, k, *static_cast<const double*>(alpha), a, at, lda, b, bt, ldb,
                     *static_cast<const double*>(beta), c, ct, ldc);
        break;
      case CUBLAS_COMPUTE_16F:
      case CUBLAS_COMPUTE_16F_PEDANTIC:
        gemm<float>(ta, tb, m, n, k, f16_to_f32(*static_cast<const uint16_t*>(alpha)), a, at, lda, b, bt, ldb,
                    f16_to_f32(*static_cast<const uint16_t*>(beta)), c, ct, ldc);
        break;
      case CUBLAS_COMPUTE_32F:
      case CUBLAS_COMPUTE_32F_PEDANTIC:
      case CUBLAS_COMPUTE_32F_FAST_16F:
      case CUBLAS_COMPUTE_32F_FAST_16BF:
      case CUBLAS_COMPUTE_32F_FAST_TF32:
        gemm<float>(ta, tb, m, n, k, *static_cast<const float*>(alpha), a, at, lda, b, bt, ldb,
                    *static_cast<const float*>(beta), c, ct, ldc);
        break;
      default:
        fprintf(stderr, "cuda_emu cublas: unsupported compute type %d\n", compute);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

const char* status_name(int s) {
  switch (s) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case 16: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

}  // namespace

#define API extern "C" __attribute__((visibility("default")))

API cublasStatus_t cublasCreate_v2(void** h) {
  if (!h) return CUBLAS_STATUS_INVALID_VALUE;
  *h = new Handle;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasDestroy_v2(void* h) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete static_cast<Handle*>(h);
  return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasGetVersion_v2(void*, int* v) {
  if (!v) return CUBLAS_STATUS_INVALID_VALUE;
  *v = 130000;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasSetStream_v2(void* h, cudaStream_t s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  static_cast<Handle*>(h)->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasGetStream_v2(void* h, cudaStream_t* s) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!s) return CUBLAS_STATUS_INVALID_VALUE;
  *s = static_cast<Handle*>(h)->stream;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasSetMathMode(void* h, int mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  static_cast<Handle*>(h)->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasGetMathMode(void* h, int* mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = static_cast<Handle*>(h)->math_mode;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasSetPointerMode_v2(void* h, int mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  static_cast<Handle*>(h)->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasGetPointerMode_v2(void* h, int* mode) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = static_cast<Handle*>(h)->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}
API cublasStatus_t cublasSetWorkspace_v2(void* h, void*, size_t) {
  return h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}
API const char* cublasGetStatusString(cublasStatus_t s) { return status_name(s); }
API const char* cublasGetStatusName(cublasStatus_t s) { return status_name(s); }

API cublasStatus_t cublasSgemm_v2(void* h, int ta, int tb, int m, int n, int k, const float* alpha, const float* A,
                                  int lda, const float* B, int ldb, const float* beta, float* C, int ldc) {
  return gemm_any(h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, beta, C, CUDA_R_32F, ldc,
                  0, 1, CUBLAS_COMPUTE_32F);
}
API cublasStatus_t cublasDgemm_v2(void* h, int ta, int tb, int m, int n, int k, const double* alpha, const double* A,
                                  int lda, const double* B, int ldb, const double* beta, double* C, int ldc) {
  return gemm_any(h, ta, tb, m, n, k, alpha, A, CUDA_R_64F, lda, 0, B, CUDA_R_64F, ldb, 0, beta, C, CUDA_R_64F, ldc,
                  0, 1, CUBLAS_COMPUTE_64F);
}
API cublasStatus_t cublasSgemmStridedBatched(void* h, int ta, int tb, int m, int n, int k, const float* alpha,
                                             const float* A, int lda, long long sa, const float* B, int ldb,
                                             long long sb, const float* beta, float* C, int ldc, long long sc,
                                             int batch) {
  return gemm_any(h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, sa, B, CUDA_R_32F, ldb, sb, beta, C, CUDA_R_32F, ldc,
                  sc, batch, CUBLAS_COMPUTE_32F);
}
API cublasStatus_t cublasDgemmStridedBatched(void* h, int ta, int tb, int m, int n, int k, const double* alpha,
                                             const double* A, int lda, long long sa, const double* B, int ldb,
                                             long long sb, const double* beta, double* C, int ldc, long long sc,
                                             int batch) {
  return gemm_any(h, ta, tb, m, n, k, alpha, A, CUDA_R_64F, lda, sa, B, CUDA_R_64F, ldb, sb, beta, C, CUDA_R_64F, ldc,
                  sc, batch, CUBLAS_COMPUTE_64F);
}
API cublasStatus_t cublasGemmEx(void* h, int ta, int tb, int m, int n, int k, const void* alpha, const void* A, int at,
                                int lda, const void* B, int bt, int ldb, const void* beta, void* C, int ct, int ldc,
                                int compute, int /*algo*/) {
  return gemm_any(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, compute);
}
API cublasStatus_t cublasGemmStridedBatchedEx(void* h, int ta, int tb, int m, int n, int k, const void* alpha,
                                              const void* A, int at, int lda, long long sa, const void* B, int bt,
                                              int ldb, long long sb, const void* beta, void* C, int ct, int ldc,
                                              long long sc, int batch, int compute, int /*algo*/) {
  return gemm_any(h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, compute);
}
// y = alpha * op(A) x + beta * y, as a GEMM with one column (strided vectors copied).
API cublasStatus_t cublasSgemv_v2(void* h, int trans, int m, int n, const float* alpha, const float* A, int lda,
                                  const float* x, int incx, const float* beta, float* y, int incy) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || incx == 0 || incy == 0) return CUBLAS_STATUS_INVALID_VALUE;
  const bool t = trans != 0;
  const int rows = t ? n : m, cols = t ? m : n;
  if (rows == 0) return CUBLAS_STATUS_SUCCESS;
  std::vector<float> xv(cols), yv(rows);
  for (int i = 0; i < cols; ++i) xv[i] = x[(incx > 0 ? i : cols - 1 - i) * (long long)std::abs(incx)];
  for (int i = 0; i < rows; ++i) yv[i] = y[(incy > 0 ? i : rows - 1 - i) * (long long)std::abs(incy)];
  cublasStatus_t s = gemm_any(h, trans, 0, rows, 1, cols, alpha, A, CUDA_R_32F, lda, 0, xv.data(), CUDA_R_32F,
                              std::max(1, cols), 0, beta, yv.data(), CUDA_R_32F, std::max(1, rows), 0, 1,
                              CUBLAS_COMPUTE_32F);
  for (int i = 0; i < rows; ++i) y[(incy > 0 ? i : rows - 1 - i) * (long long)std::abs(incy)] = yv[i];
  return s;
}
