// hopscore CUDA CPU emulator: a fake cuBLASLt (libcublasLt.so), the subset that
// cudarc's `CudaBlasLT::matmul` uses: handle, matmul/layout/preference descriptors,
// a heuristic that offers one algorithm per problem, an algorithm check, and
// cublasLtMatmul computing
//   D = epilogue(alpha * op(A) @ op(B) + beta * C [+ bias])
// with float accumulation (double for CUBLAS_COMPUTE_64F), column- or row-major
// layouts, strided batches, bias (one value per row of D, in D's type unless
// CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE says otherwise) and the RELU / GELU (tanh
// approximation, as cuBLASLt) epilogues. Device pointers are host addresses. On a
// stream that the fake driver is capturing, a matmul is recorded into the graph (its
// descriptors and scalars copied) and runs at each replay instead.
//
// The algorithm depends on the problem's size, as cuBLASLt's does: a problem of few
// output tiles (64 x 64 of D, times the batch) is given split-K (K summed in 2 or 4
// contiguous parts, added in order), unless the preference's reduction-scheme mask is
// NONE. So the same row of D can round differently in another batch size, as on a GPU,
// and a caller that wants the same bits whatever the batch must pin the algorithm.
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "halfbits.h"

typedef int cublasStatus_t;

namespace {

enum : int { OK = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7, NOT_SUPPORTED = 15 };
enum : int { R_32F = 0, R_64F = 1, R_16F = 2, R_16BF = 14 };
enum : int { EPI_DEFAULT = 1, EPI_RELU = 2, EPI_BIAS = 4, EPI_RELU_BIAS = 6, EPI_GELU = 32, EPI_GELU_BIAS = 36 };

struct Layout {
  int type;
  uint64_t rows, cols;
  int64_t ld;
  int order = 0;  // 0 COL, 1 ROW
  int batch = 1;
  int64_t batch_stride = 0;
};
struct Desc {
  int compute, scale_type;
  int transa = 0, transb = 0;
  int epilogue = EPI_DEFAULT;
  const void* bias = nullptr;
  int bias_type = -1;
  int64_t bias_batch_stride = 0;
  int pointer_mode = 0;
};
struct Pref {
  size_t max_workspace = 0;
  uint32_t reduction_mask = 7;  // CUBLASLT_REDUCTION_SCHEME_MASK: every scheme allowed
};

// cublasLtMatmulAlgo_t: 8 x u64; word 0 marks an emulator algorithm, word 1 its split-K.
constexpr uint64_t ALGO_MARK = 0x656d75;  // "emu"

// The split-K the heuristic gives a problem: D of m x n in `batch` parts, depth k.
uint64_t split_for(uint64_t m, uint64_t n, uint64_t k, int batch, uint32_t reduction_mask) {
  if (reduction_mask == 0) return 1;
  const uint64_t tiles = ((m + 63) / 64) * ((n + 63) / 64) * uint64_t(batch < 1 ? 1 : batch);
  uint64_t split = tiles <= 2 ? 4 : (tiles <= 8 ? 2 : 1);
  while (split > 1 && k < 16 * split) split /= 2;
  return split;
}

bool type_ok(int t) { return t == R_32F || t == R_64F || t == R_16F || t == R_16BF; }
size_t esize(int t) { return t == R_64F ? 8 : (t == R_32F ? 4 : 2); }

inline double load(const void* p, int type, size_t i) {
  switch (type) {
    case R_32F: return static_cast<const float*>(p)[i];
    case R_64F: return static_cast<const double*>(p)[i];
    case R_16F: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  }
}
inline void store(void* p, int type, size_t i, double v) {
  switch (type) {
    case R_32F: static_cast<float*>(p)[i] = float(v); break;
    case R_64F: static_cast<double*>(p)[i] = v; break;
    case R_16F: static_cast<uint16_t*>(p)[i] = f32_to_f16(float(v)); break;
    default: static_cast<uint16_t*>(p)[i] = f32_to_bf16(float(v)); break;
  }
}
inline size_t at(const Layout& l, uint64_t r, uint64_t c) {
  return l.order == 1 ? size_t(r * uint64_t(l.ld) + c) : size_t(r + c * uint64_t(l.ld));
}

template <typename Acc>
void matmul(const Desc& d, Acc alpha, Acc beta, const char* A, const Layout& la, const char* B, const Layout& lb,
            const char* C, const Layout& lc, char* D, const Layout& ld_, const char* bias, uint64_t m, uint64_t n,
            uint64_t k, uint64_t split) {
  std::vector<Acc> a(m * k), b(n * k);
  for (uint64_t i = 0; i < m; ++i)
    for (uint64_t l = 0; l < k; ++l) a[i * k + l] = Acc(load(A, la.type, d.transa ? at(la, l, i) : at(la, i, l)));
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t l = 0; l < k; ++l) b[j * k + l] = Acc(load(B, lb.type, d.transb ? at(lb, j, l) : at(lb, l, j)));
  const int bias_type = d.bias_type >= 0 ? d.bias_type : ld_.type;
  // Split-K: parts of `part` (a multiple of 8) summed alone, then added in order.
  const uint64_t part = ((k + split - 1) / split + 7) / 8 * 8;
  for (uint64_t j = 0; j < n; ++j)
    for (uint64_t i = 0; i < m; ++i) {
      const Acc* ai = &a[i * k];
      const Acc* bj = &b[j * k];
      Acc s = 0;
      for (uint64_t k0 = 0; k0 < k; k0 += part) {
        const uint64_t k1 = std::min(k, k0 + part);
        Acc p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        uint64_t l = k0;
        for (; l + 8 <= k1; l += 8)
          for (int u = 0; u < 8; ++u) p[u] += ai[l + u] * bj[l + u];
        for (int u = 0; l < k1; ++l, ++u) p[u] += ai[l] * bj[l];
        const Acc t = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
        s = k0 == 0 ? t : s + t;
      }
      Acc v = alpha * s;
      if (beta != Acc(0) && C) v += beta * Acc(load(C, lc.type, at(lc, i, j)));
      if (bias) v += Acc(load(bias, bias_type, i));
      if (d.epilogue == EPI_RELU || d.epilogue == EPI_RELU_BIAS) {
        v = v > Acc(0) ? v : Acc(0);
      } else if (d.epilogue == EPI_GELU || d.epilogue == EPI_GELU_BIAS) {
        const Acc x = v;
        v = Acc(0.5) * x * (Acc(1) + std::tanh(Acc(0.7978845608028654) * (x + Acc(0.044715) * x * x * x)));
      }
      store(D, ld_.type, at(ld_, i, j), double(v));
    }
}

}  // namespace

#define API extern "C" __attribute__((visibility("default")))

API cublasStatus_t cublasLtCreate(void** h) {
  if (!h) return INVALID_VALUE;
  *h = new int(0);
  return OK;
}
API cublasStatus_t cublasLtDestroy(void* h) {
  if (!h) return NOT_INITIALIZED;
  delete static_cast<int*>(h);
  return OK;
}
API size_t cublasLtGetVersion() { return 130000; }
API cublasStatus_t cublasLtLoggerOpenFile(const char*) { return OK; }
API cublasStatus_t cublasLtLoggerSetLevel(int) { return OK; }

API cublasStatus_t cublasLtMatrixLayoutCreate(void** out, int type, uint64_t rows, uint64_t cols, int64_t ld) {
  if (!out) return INVALID_VALUE;
  if (!type_ok(type)) {
    fprintf(stderr, "cuda_emu cublasLt: unsupported data type %d\n", type);
    return NOT_SUPPORTED;
  }
  auto* l = new Layout;
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *out = l;
  return OK;
}
API cublasStatus_t cublasLtMatrixLayoutDestroy(void* l) {
  delete static_cast<Layout*>(l);
  return OK;
}
API cublasStatus_t cublasLtMatrixLayoutSetAttribute(void* lp, int attr, const void* buf, size_t size) {
  auto* l = static_cast<Layout*>(lp);
  if (!l || !buf) return INVALID_VALUE;
  int32_t i32 = 0;
  int64_t i64 = 0;
  uint64_t u64 = 0;
  if (size >= 4) memcpy(&i32, buf, 4);
  if (size >= 8) memcpy(&i64, buf, 8), memcpy(&u64, buf, 8);
  switch (attr) {
    case 0: l->type = i32; break;                                                     // TYPE
    case 1: if (i32 != 0 && i32 != 1) return NOT_SUPPORTED; l->order = i32; break;   // ORDER
    case 2: l->rows = u64; break;
    case 3: l->cols = u64; break;
    case 4: l->ld = i64; break;
    case 5: l->batch = i32; break;                                                    // BATCH_COUNT
    case 6: l->batch_stride = i64; break;                                             // STRIDED_BATCH_OFFSET
    default: return NOT_SUPPORTED;
  }
  return OK;
}

API cublasStatus_t cublasLtMatmulDescCreate(void** out, int compute, int scale_type) {
  if (!out) return INVALID_VALUE;
  auto* d = new Desc;
  d->compute = compute;
  d->scale_type = scale_type;
  *out = d;
  return OK;
}
API cublasStatus_t cublasLtMatmulDescDestroy(void* d) {
  delete static_cast<Desc*>(d);
  return OK;
}
API cublasStatus_t cublasLtMatmulDescSetAttribute(void* dp, int attr, const void* buf, size_t size) {
  auto* d = static_cast<Desc*>(dp);
  if (!d || !buf) return INVALID_VALUE;
  int32_t i32 = 0;
  int64_t i64 = 0;
  if (size >= 4) memcpy(&i32, buf, 4);
  if (size >= 8) memcpy(&i64, buf, 8);
  switch (attr) {
    case 0: d->compute = i32; break;
    case 1: d->scale_type = i32; break;
    case 2: d->pointer_mode = i32; break;
    case 3: d->transa = i32; break;
    case 4: d->transb = i32; break;
    case 5: if (i32 != 0) return NOT_SUPPORTED; break;  // TRANSC
    case 7:
      if (i32 != EPI_DEFAULT && i32 != EPI_RELU && i32 != EPI_BIAS && i32 != EPI_RELU_BIAS && i32 != EPI_GELU &&
          i32 != EPI_GELU_BIAS) {
        fprintf(stderr, "cuda_emu cublasLt: unsupported epilogue %d\n", i32);
        return NOT_SUPPORTED;
      }
      d->epilogue = i32;
      break;
    case 8: d->bias = reinterpret_cast<const void*>(uintptr_t(i64)); break;
    case 10: d->bias_batch_stride = i64; break;
    case 26: d->bias_type = i32; break;
    default:
      fprintf(stderr, "cuda_emu cublasLt: unsupported matmul descriptor attribute %d\n", attr);
      return NOT_SUPPORTED;
  }
  return OK;
}

API cublasStatus_t cublasLtMatmulPreferenceCreate(void** out) {
  if (!out) return INVALID_VALUE;
  *out = new Pref;
  return OK;
}
API cublasStatus_t cublasLtMatmulPreferenceDestroy(void* p) {
  delete static_cast<Pref*>(p);
  return OK;
}
API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(void* p, int attr, const void* buf, size_t size) {
  if (!p || !buf) return INVALID_VALUE;
  if (attr == 3) {  // CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK (uint32_t)
    if (size != 4) return INVALID_VALUE;
    memcpy(&static_cast<Pref*>(p)->reduction_mask, buf, 4);
  }
  return OK;
}

// cublasLtMatmulHeuristicResult_t: algo (8 x u64), workspaceSize, state, wavesCount, reserved[4].
struct HeuristicResult {
  uint64_t algo[8];
  size_t workspace;
  int state;
  float waves;
  int reserved[4];
};
API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(void* h, void* dp, void* Adesc, void*, void*, void* Ddesc, void* pp,
                                                  int requested, HeuristicResult* results, int* count) {
  if (!h || !dp || !Adesc || !Ddesc || !pp || !results || !count || requested < 1) return INVALID_VALUE;
  const auto* d = static_cast<const Desc*>(dp);
  const auto *la = static_cast<const Layout*>(Adesc), *ld = static_cast<const Layout*>(Ddesc);
  const uint64_t k = d->transa ? la->rows : la->cols;
  memset(results, 0, sizeof(HeuristicResult));
  results[0].algo[0] = ALGO_MARK;
  results[0].algo[1] = split_for(ld->rows, ld->cols, k, ld->batch, static_cast<const Pref*>(pp)->reduction_mask);
  results[0].waves = 1.0f;
  *count = 1;
  return OK;
}

// Every emulator algorithm runs every problem of this subset.
API cublasStatus_t cublasLtMatmulAlgoCheck(void* h, void* d, void*, void*, void*, void*, const uint64_t* algo,
                                           HeuristicResult* result) {
  if (!h || !d || !algo || !result) return INVALID_VALUE;
  if (algo[0] != ALGO_MARK) return INVALID_VALUE;
  memset(result, 0, sizeof(HeuristicResult));
  memcpy(result->algo, algo, sizeof(result->algo));
  result->waves = 1.0f;
  return OK;
}

namespace {

// One matmul with its descriptors and scalars copied: what a graph node replays.
struct Call {
  Desc d;
  Layout la, lb, lc, ld;
  unsigned char alpha[8], beta[8];
  const void *A, *B, *C;
  void* D;
  uint64_t split;
};

cublasStatus_t run(const Call& c) {
  const Desc& d = c.d;
  const Layout *la = &c.la, *lb = &c.lb, *lc = &c.lc, *ld = &c.ld;
  const uint64_t m = ld->rows, n = ld->cols;
  const uint64_t k = d.transa ? la->rows : la->cols;
  const bool has_bias = d.epilogue == EPI_BIAS || d.epilogue == EPI_RELU_BIAS || d.epilogue == EPI_GELU_BIAS;
  const int batch = ld->batch;
  const int bias_type = d.bias_type >= 0 ? d.bias_type : ld->type;
  for (int bi = 0; bi < batch; ++bi) {
    auto off = [&](const Layout* l) { return (l->batch > 1 ? bi * l->batch_stride : 0) * int64_t(esize(l->type)); };
    const char* a = static_cast<const char*>(c.A) + off(la);
    const char* b = static_cast<const char*>(c.B) + off(lb);
    const char* cc = c.C ? static_cast<const char*>(c.C) + off(lc) : nullptr;
    char* dd = static_cast<char*>(c.D) + off(ld);
    const char* bias =
        has_bias ? static_cast<const char*>(d.bias) + bi * d.bias_batch_stride * int64_t(esize(bias_type)) : nullptr;
    if (d.compute == 70 || d.compute == 71) {
      double alpha, beta;
      memcpy(&alpha, c.alpha, 8);
      memcpy(&beta, c.beta, 8);
      matmul<double>(d, alpha, beta, a, *la, b, *lb, cc, *lc, dd, *ld, bias, m, n, k, c.split);
    } else if (d.scale_type == R_16F) {
      uint16_t alpha, beta;
      memcpy(&alpha, c.alpha, 2);
      memcpy(&beta, c.beta, 2);
      matmul<float>(d, f16_to_f32(alpha), f16_to_f32(beta), a, *la, b, *lb, cc, *lc, dd, *ld, bias, m, n, k,
                   c.split);
    } else {
      float alpha, beta;
      memcpy(&alpha, c.alpha, 4);
      memcpy(&beta, c.beta, 4);
      matmul<float>(d, alpha, beta, a, *la, b, *lb, cc, *lc, dd, *ld, bias, m, n, k, c.split);
    }
  }
  return OK;
}

// The fake driver's `hopscore_emu_capture(stream, run, ctx, drop)`: records `run(ctx)` into
// the graph `stream` is capturing and returns 1, or returns 0 when it is not capturing.
typedef int (*CaptureHook)(void*, int (*)(void*), void*, void (*)(void*));
CaptureHook capture_hook() {
  static const CaptureHook hook = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (!lib) lib = dlopen("libcuda.so", RTLD_NOLOAD | RTLD_LAZY);
    return lib ? reinterpret_cast<CaptureHook>(dlsym(lib, "hopscore_emu_capture")) : nullptr;
  }();
  return hook;
}

}  // namespace

API cublasStatus_t cublasLtMatmul(void* h, void* dp, const void* alpha, const void* A, void* Adesc, const void* B,
                                  void* Bdesc, const void* beta, const void* C, void* Cdesc, void* D, void* Ddesc,
                                  const uint64_t* algo, void* /*workspace*/, size_t /*ws*/, void* stream) {
  auto* d = static_cast<Desc*>(dp);
  auto *la = static_cast<Layout*>(Adesc), *lb = static_cast<Layout*>(Bdesc), *lc = static_cast<Layout*>(Cdesc),
       *ld = static_cast<Layout*>(Ddesc);
  if (!h) return NOT_INITIALIZED;
  if (!d || !la || !lb || !lc || !ld || !alpha || !beta || !A || !B || !D) return INVALID_VALUE;
  const uint64_t m = ld->rows, n = ld->cols;
  const uint64_t k = d->transa ? la->rows : la->cols;
  const uint64_t am = d->transa ? la->cols : la->rows;
  const uint64_t bk = d->transb ? lb->cols : lb->rows, bn = d->transb ? lb->rows : lb->cols;
  if (am != m || bk != k || bn != n || lc->rows != m || lc->cols != n) {
    fprintf(stderr,
            "cuda_emu cublasLt: shape mismatch: op(A) %llux%llu, op(B) %llux%llu, C %llux%llu, D %llux%llu\n",
            (unsigned long long)am, (unsigned long long)k, (unsigned long long)bk, (unsigned long long)bn,
            (unsigned long long)lc->rows, (unsigned long long)lc->cols, (unsigned long long)m,
            (unsigned long long)n);
    return INVALID_VALUE;
  }
  const bool has_bias = d->epilogue == EPI_BIAS || d->epilogue == EPI_RELU_BIAS || d->epilogue == EPI_GELU_BIAS;
  if (has_bias && !d->bias) return INVALID_VALUE;
  // No algorithm: the heuristic's choice for this problem, as cuBLASLt does.
  const uint64_t split = algo ? algo[1] : split_for(m, n, k, ld->batch, 7);
  if (algo && (algo[0] != ALGO_MARK || split < 1)) return INVALID_VALUE;
  const size_t scalar = (d->compute == 70 || d->compute == 71) ? 8 : (d->scale_type == R_16F ? 2 : 4);
  auto* call = new Call{*d, *la, *lb, *lc, *ld, {}, {}, A, B, C, D, split};
  memcpy(call->alpha, alpha, scalar);
  memcpy(call->beta, beta, scalar);
  auto run_node = [](void* c) { return int(run(*static_cast<Call*>(c))); };
  auto drop = [](void* c) { delete static_cast<Call*>(c); };
  if (CaptureHook hook = capture_hook(); hook && hook(stream, run_node, call, drop)) return OK;
  const cublasStatus_t status = run(*call);
  delete call;
  return status;
}
