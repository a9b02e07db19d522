// Host side of gemm_bias_gelu.cu: CUTLASS's own argument checks and Params for one
// call, built here (C ABI, linked into the Rust crate) and launched through the driver
// API by src/backend/cuda/cutlass.rs. Compiled by nvcc as host code only: it links no
// CUDA runtime, so the three runtime hooks CUTLASS's host code can reach are routed
// here, and the device image nvcc emits for this file (no kernels in it) is registered
// with nothing.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <driver_types.h>

#include <cstddef>
#include <cstring>

#include "operands.h"

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

namespace {
// The caller's cuTensorMapEncodeTiled (the driver the backend loaded) for this call,
// and the first error it returned.
thread_local EncodeTiled t_encode = nullptr;
thread_local CUresult t_encode_error = CUDA_SUCCESS;

CUresult encode_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* base,
                      const cuuint64_t* dims, const cuuint64_t* strides, const cuuint32_t* box,
                      const cuuint32_t* element_strides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                      CUtensorMapL2promotion promotion, CUtensorMapFloatOOBfill fill) {
  const CUresult r = t_encode ? t_encode(map, type, rank, base, dims, strides, box, element_strides, interleave,
                                         swizzle, promotion, fill)
                              : CUDA_ERROR_NOT_INITIALIZED;
  if (t_encode_error == CUDA_SUCCESS) t_encode_error = r;
  return r;
}
// KernelHardwareInfo's queries, reached only when sm_count is not given (it always is).
cudaError_t no_runtime_get_device(int*) { return cudaErrorNotSupported; }
cudaError_t no_runtime_attribute(int*, cudaDeviceAttr, int) { return cudaErrorNotSupported; }
}  // namespace

#define CUTLASS_ENABLE_DIRECT_CUDA_DRIVER_CALL 1
#define cuTensorMapEncodeTiled encode_tiled
#define cudaGetDevice no_runtime_get_device
#define cudaDeviceGetAttribute no_runtime_attribute
#include "gemm_bias_gelu.cuh"
#undef cuTensorMapEncodeTiled
#undef cudaGetDevice
#undef cudaDeviceGetAttribute

#include <cutlass/util/packed_stride.hpp>

namespace {
// 0: Params written; 1: CUTLASS cannot run this shape (alignment); 2: `capacity` too
// small; 3: a tensor map was refused; 4: the kernel would need a workspace.
template <class T>
int build(const HopscoreGemmOperands& o, void* params, size_t capacity, HopscoreGemmLaunch* launch) {
  using Kernel = typename hopscore_cutlass::BiasGelu<T>::Kernel;
  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {o.m, o.n, o.k, 1};
  args.mainloop.ptr_A = reinterpret_cast<const T*>(o.a);
  args.mainloop.dA = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, cute::make_shape(o.m, o.k, 1));
  args.mainloop.ptr_B = reinterpret_cast<const T*>(o.b);
  args.mainloop.dB = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(o.n, o.k, 1));
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = reinterpret_cast<T*>(o.d);
  args.epilogue.dD = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(o.m, o.n, 1));
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
  args.epilogue.thread.bias_ptr = reinterpret_cast<const T*>(o.bias);
  args.hw_info.device_id = 0;
  args.hw_info.sm_count = o.sm_count;
  if (Kernel::can_implement(args) != true) return 1;
  if (Kernel::get_workspace_size(args) != 0) return 4;
  if (sizeof(typename Kernel::Params) > capacity) return 2;
  t_encode_error = CUDA_SUCCESS;
  const auto p = Kernel::to_underlying_arguments(args, nullptr);
  if (t_encode_error != CUDA_SUCCESS) return 3;
  std::memcpy(params, &p, sizeof(p));
  const dim3 grid = Kernel::get_grid_shape(p), block = Kernel::get_block_shape();
  *launch = HopscoreGemmLaunch{{grid.x, grid.y, grid.z},
                               {block.x, block.y, block.z},
                               unsigned(Kernel::SharedStorageSize),
                               unsigned(sizeof(p))};
  return 0;
}
}  // namespace

// The Params of `gemm_bias_gelu_<dtype>` for `operands` into `params` (`capacity`
// bytes, 64-byte aligned), and its launch shape; `f16` picks the dtype (else bf16).
// Returns build()'s code; `*encode_error` is the driver's error for code 3.
extern "C" int hopscore_gemm_bias_gelu_params(int f16, const HopscoreGemmOperands* operands, EncodeTiled encode,
                                              void* params, size_t capacity, HopscoreGemmLaunch* launch,
                                              int* encode_error) {
  t_encode = encode;
  const int r = f16 ? build<cutlass::half_t>(*operands, params, capacity, launch)
                    : build<cutlass::bfloat16_t>(*operands, params, capacity, launch);
  *encode_error = int(t_encode_error);
  t_encode = nullptr;
  return r;
}

// nvcc registers this file's (empty) device image from a static constructor; with no
// CUDA runtime linked there is nothing to register it with. Hidden: no other library
// sees these.
#define HOPSCORE_NO_RUNTIME extern "C" __attribute__((weak, visibility("hidden")))
HOPSCORE_NO_RUNTIME void** __cudaRegisterFatBinary(void*) { return nullptr; }
HOPSCORE_NO_RUNTIME void __cudaRegisterFatBinaryEnd(void**) {}
HOPSCORE_NO_RUNTIME void __cudaUnregisterFatBinary(void**) {}
HOPSCORE_NO_RUNTIME void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
