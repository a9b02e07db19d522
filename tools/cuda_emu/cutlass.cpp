// The CUTLASS GEMMs of kernels/cutlass/ in the emulator. Their device code is CUTLASS's
// (inline PTX throughout, not the kernels/common.cuh wrappers this emulator models), so
// each entry is registered here with a CPU stand-in instead, as the fake cuBLASLt
// stands in for cuBLASLt: it reads the call's operands (the kernel's first parameter,
// kernels/cutlass/operands.h) and ignores CUTLASS's Params. Its threads split the
// output elements; each is an f32 dot product in k order, then the epilogue in f32 and
// one rounding, as the kernel's. The Params builder still runs on the host, so its
// tensor maps go through this driver's cuTensorMapEncodeTiled checks.
#include <vector>

#include "activations.cuh"
#include "common.cuh"
#include "cutlass/operands.h"

namespace {

// Element e of an [m, width] output, for this thread's share of the grid.
template <typename F>
void for_each_output(size_t outputs, F f) {
  const size_t threads = size_t(gridDim.x) * gridDim.y * gridDim.z * blockDim.x;
  const size_t self = (size_t(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x * blockDim.x +
                      size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t e = self; e < outputs; e += threads) f(e);
}

// Row `row` of A times row `col` of B, in f32, in k order.
template <typename T>
float dot(const HopscoreGemmOperands& o, size_t row, size_t col) {
  const T* a = reinterpret_cast<const T*>(o.a) + row * o.k;
  const T* b = reinterpret_cast<const T*>(o.b) + col * o.k;
  float acc = 0.0f;
  for (int k = 0; k < o.k; ++k) acc += hopscore::to_float(a[k]) * hopscore::to_float(b[k]);
  return acc;
}

template <typename T>
void gemm_bias_gelu(const HopscoreGemmOperands& o) {
  const T* bias = reinterpret_cast<const T*>(o.bias);
  T* d = reinterpret_cast<T*>(o.d);
  for_each_output(size_t(o.m) * o.n, [&](size_t e) {
    const size_t row = e / o.n, col = e % o.n;
    d[e] = hopscore::from_float<T>(hopscore::gelu_erf(dot<T>(o, row, col) + hopscore::to_float(bias[col])));
  });
}

// Output column c pairs gate column 2·64·(c / 64) + c % 64 with the up column 64 on.
template <typename T, typename Act>
void gemm_gated(const HopscoreGemmOperands& o) {
  constexpr size_t block = HOPSCORE_GATED_BLOCK;
  const size_t width = size_t(o.n) / 2;
  T* d = reinterpret_cast<T*>(o.d);
  for_each_output(size_t(o.m) * width, [&](size_t e) {
    const size_t row = e / width, c = e % width, gate = c / block * 2 * block + c % block;
    d[e] = hopscore::from_float<T>(Act()(dot<T>(o, row, gate)) * dot<T>(o, row, gate + block));
  });
}

// Row by row: x = dot + bias + residual in f32, then the LayerNorm's two passes (the
// mean, then Σ (x − mean)²) and one rounding.
template <typename T>
void gemm_add_norm(const HopscoreGemmOperands& o) {
  const T* bias = reinterpret_cast<const T*>(o.bias);
  const T* residual = reinterpret_cast<const T*>(o.residual);
  const T* gamma = reinterpret_cast<const T*>(o.gamma);
  const T* beta = reinterpret_cast<const T*>(o.beta);
  T* d = reinterpret_cast<T*>(o.d);
  const size_t n = size_t(o.n);
  std::vector<float> x(n);
  for_each_output(size_t(o.m), [&](size_t row) {
    float sum = 0.0f;
    for (size_t c = 0; c < n; ++c) {
      x[c] = dot<T>(o, row, c) + hopscore::to_float(bias[c]) + hopscore::to_float(residual[row * n + c]);
      sum += x[c];
    }
    const float mean = sum / float(n);
    float sq = 0.0f;
    for (size_t c = 0; c < n; ++c) sq += (x[c] - mean) * (x[c] - mean);
    const float inv = 1.0f / sqrtf(sq / float(n) + o.eps);
    for (size_t c = 0; c < n; ++c)
      d[row * n + c] = hopscore::from_float<T>((x[c] - mean) * inv * hopscore::to_float(gamma[c]) +
                                                hopscore::to_float(beta[c]));
  });
}

}  // namespace

#define STAND_IN(NAME, ...)                                                      \
  extern "C" __global__ void NAME(const HopscoreGemmOperands o) { __VA_ARGS__(o); } \
  HOPSCORE_ENTRY(NAME);

STAND_IN(gemm_bias_gelu_bf16, gemm_bias_gelu<__nv_bfloat16>)
STAND_IN(gemm_bias_gelu_f16, gemm_bias_gelu<__half>)
STAND_IN(gemm_gated_silu_bf16, gemm_gated<__nv_bfloat16, hopscore::Silu>)
STAND_IN(gemm_gated_silu_f16, gemm_gated<__half, hopscore::Silu>)
STAND_IN(gemm_gated_gelu_new_bf16, gemm_gated<__nv_bfloat16, hopscore::GeluNew>)
STAND_IN(gemm_gated_gelu_new_f16, gemm_gated<__half, hopscore::GeluNew>)
STAND_IN(gemm_add_norm_1024_bf16, gemm_add_norm<__nv_bfloat16>)
STAND_IN(gemm_add_norm_1024_f16, gemm_add_norm<__half>)
STAND_IN(gemm_add_norm_768_bf16, gemm_add_norm<__nv_bfloat16>)
STAND_IN(gemm_add_norm_768_f16, gemm_add_norm<__half>)
