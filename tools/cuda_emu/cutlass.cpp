// The CUTLASS GEMMs of kernels/cutlass/ in the emulator. Their device code is CUTLASS's
// (inline PTX throughout, not the kernels/common.cuh wrappers this emulator models), so
// each entry is registered here with a CPU stand-in instead, as the fake cuBLASLt
// stands in for cuBLASLt: it reads the call's operands (the kernel's first parameter,
// kernels/cutlass/operands.h) and ignores CUTLASS's Params. Its threads split the
// output elements; each is an f32 dot product in k order, then the epilogue in f32 and
// one rounding, as the kernel's. The Params builder still runs on the host, so its
// tensor maps go through this driver's cuTensorMapEncodeTiled checks.
#include "common.cuh"
#include "cutlass/operands.h"

namespace {

template <typename T>
void gemm_bias_gelu(const HopscoreGemmOperands& o) {
  const T* a = reinterpret_cast<const T*>(o.a);
  const T* b = reinterpret_cast<const T*>(o.b);
  const T* bias = reinterpret_cast<const T*>(o.bias);
  T* d = reinterpret_cast<T*>(o.d);
  const size_t threads = size_t(gridDim.x) * gridDim.y * gridDim.z * blockDim.x;
  const size_t self = (size_t(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x * blockDim.x +
                      size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t e = self; e < size_t(o.m) * o.n; e += threads) {
    const size_t row = e / o.n, col = e % o.n;
    float acc = 0.0f;
    for (int k = 0; k < o.k; ++k)
      acc += hopscore::to_float(a[row * o.k + k]) * hopscore::to_float(b[col * o.k + k]);
    d[e] = hopscore::from_float<T>(hopscore::gelu_erf(acc + hopscore::to_float(bias[col])));
  }
}

}  // namespace

extern "C" __global__ void gemm_bias_gelu_bf16(const HopscoreGemmOperands o) { gemm_bias_gelu<__nv_bfloat16>(o); }
HOPSCORE_ENTRY(gemm_bias_gelu_bf16);
extern "C" __global__ void gemm_bias_gelu_f16(const HopscoreGemmOperands o) { gemm_bias_gelu<__half>(o); }
HOPSCORE_ENTRY(gemm_bias_gelu_f16);
