// Host side of the CUTLASS GEMMs (gemm_bias_gelu.cu, gemm_gated.cu, gemm_add_norm.cu): CUTLASS's own
// argument checks and Params for one call, built here (C ABI, linked into the Rust
// crate) and launched through the driver API by src/backend/cuda/cutlass.rs. Compiled by nvcc as host code only: it links no
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
#include "gemm_add_norm.cuh"
#include "gemm_bias_gelu.cuh"
#include "gemm_gated.cuh"
#undef cuTensorMapEncodeTiled
#undef cudaGetDevice
#undef cudaDeviceGetAttribute

#include <cutlass/util/packed_stride.hpp>

namespace {
// The epilogue's arguments of each kernel (`Op`: its struct in the headers).
template <class T>
void epilogue_args(hopscore_cutlass::BiasGelu<T>*, typename hopscore_cutlass::BiasGelu<T>::Kernel::Arguments& args,
                   const HopscoreGemmOperands& o) {
  using Kernel = typename hopscore_cutlass::BiasGelu<T>::Kernel;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = reinterpret_cast<T*>(o.d);
  args.epilogue.dD = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(o.m, o.n, 1));
  args.epilogue.thread.alpha = 1.f;
  args.epilogue.thread.beta = 0.f;
  args.epilogue.thread.bias_ptr = reinterpret_cast<const T*>(o.bias);
}
template <class T, class Act>
void epilogue_args(hopscore_cutlass::Gated<T, Act>*, typename hopscore_cutlass::Gated<T, Act>::Kernel::Arguments& args,
                   const HopscoreGemmOperands& o) {
  args.epilogue.ptr_D = reinterpret_cast<T*>(o.d);
}
template <class T, int kWidth>
void epilogue_args(hopscore_cutlass::AddNorm<T, kWidth>*,
                   typename hopscore_cutlass::AddNorm<T, kWidth>::Kernel::Arguments& args,
                   const HopscoreGemmOperands& o) {
  args.epilogue.ptr_D = reinterpret_cast<T*>(o.d);
  args.epilogue.residual = reinterpret_cast<const T*>(o.residual);
  args.epilogue.bias = reinterpret_cast<const T*>(o.bias);
  args.epilogue.gamma = reinterpret_cast<const T*>(o.gamma);
  args.epilogue.beta = reinterpret_cast<const T*>(o.beta);
  args.epilogue.eps = o.eps;
}

// 0: Params written; 1: CUTLASS cannot run this shape (alignment, width); 2:
// `capacity` too small; 3: a tensor map was refused; 4: the kernel would need a
// workspace.
template <class Op, class T>
int build(const HopscoreGemmOperands& o, void* params, size_t capacity, HopscoreGemmLaunch* launch) {
  using Kernel = typename Op::Kernel;
  typename Kernel::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {o.m, o.n, o.k, 1};
  args.mainloop.ptr_A = reinterpret_cast<const T*>(o.a);
  args.mainloop.dA = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, cute::make_shape(o.m, o.k, 1));
  args.mainloop.ptr_B = reinterpret_cast<const T*>(o.b);
  args.mainloop.dB = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(o.n, o.k, 1));
  epilogue_args(static_cast<Op*>(nullptr), args, o);
  args.hw_info.device_id = 0;
  args.hw_info.sm_count = o.sm_count;
  args.hw_info.max_active_clusters = o.max_active_clusters;
  if (Kernel::can_implement(args) != true) return 1;
  if (Kernel::get_workspace_size(args) != 0) return 4;
  if (sizeof(typename Kernel::Params) > capacity) return 2;
  t_encode_error = CUDA_SUCCESS;
  const auto p = Kernel::to_underlying_arguments(args, nullptr);
  if (t_encode_error != CUDA_SUCCESS) return 3;
  std::memcpy(params, &p, sizeof(p));
  const dim3 grid = Kernel::get_grid_shape(p), block = Kernel::get_block_shape();
  using Cluster = typename Kernel::ClusterShape;
  *launch = HopscoreGemmLaunch{{grid.x, grid.y, grid.z},
                               {block.x, block.y, block.z},
                               {unsigned(cute::size<0>(Cluster{})), unsigned(cute::size<1>(Cluster{})),
                                unsigned(cute::size<2>(Cluster{}))},
                               unsigned(Kernel::SharedStorageSize),
                               unsigned(sizeof(p))};
  return 0;
}

template <class T>
int build_kind(int kind, const HopscoreGemmOperands& o, void* params, size_t capacity, HopscoreGemmLaunch* launch) {
  using namespace hopscore_cutlass;
  switch (kind) {
    case HOPSCORE_GEMM_BIAS_GELU:
      return build<BiasGelu<T>, T>(o, params, capacity, launch);
    case HOPSCORE_GEMM_GATED_SILU:
      return build<Gated<T, hopscore::Silu>, T>(o, params, capacity, launch);
    case HOPSCORE_GEMM_GATED_GELU_NEW:
      return build<Gated<T, hopscore::GeluNew>, T>(o, params, capacity, launch);
    case HOPSCORE_GEMM_ADD_NORM_1024:
      return build<AddNorm<T, 1024>, T>(o, params, capacity, launch);
    case HOPSCORE_GEMM_ADD_NORM_768:
      return build<AddNorm<T, 768>, T>(o, params, capacity, launch);
    default:
      return 5;
  }
}
}  // namespace

// The Params of kernel `kind` (operands.h) in `f16` (else bf16) for `operands` into
// `params` (`capacity` bytes, 64-byte aligned), and its launch shape. Returns build()'s
// code (5: no such kind); `*encode_error` is the driver's error for code 3.
extern "C" int hopscore_gemm_params(int kind, int f16, const HopscoreGemmOperands* operands, EncodeTiled encode,
                                    void* params, size_t capacity, HopscoreGemmLaunch* launch, int* encode_error) {
  t_encode = encode;
  const int r = f16 ? build_kind<cutlass::half_t>(kind, *operands, params, capacity, launch)
                    : build_kind<cutlass::bfloat16_t>(kind, *operands, params, capacity, launch);
  *encode_error = int(t_encode_error);
  t_encode = nullptr;
  return r;
}

// The gated kernels' epilogue reads each gate and its up from fixed accumulator
// positions of wgmma's layout (gate_value, up_value in gemm_gated.cuh). The device code
// runs only on a GPU, so this checks that reading on the host against CUTLASS's own
// partitioning of the tile: for every consumer thread, every pair must be a gate column
// (< 64) and the up 64 columns to its right in the same row, with the two output
// pixels covering every cell of the 128 × 128 tile exactly once. Returns the number of
// violations (0: the pairing holds); called by the crate's tests.
extern "C" int hopscore_gemm_gated_layout_errors() {
  using namespace cute;
  using Kernel = hopscore_cutlass::Gated<cutlass::bfloat16_t, hopscore::Silu>::Kernel;
  using Tile = typename Kernel::TileShape;
  typename Kernel::TiledMma mma;
  const auto tile = take<0, 2>(Tile{});
  const auto fragment = partition_fragment_C(mma, tile);
  constexpr int rows = decltype(size<0>(Tile{}))::value, cols = decltype(size<1>(Tile{}))::value;
  static int seen[rows][cols];
  std::memset(seen, 0, sizeof(seen));
  int errors = 0;
  for (int t = 0; t < int(size(mma)); ++t) {
    const auto coords = mma.get_thread_slice(t).partition_C(make_identity_tensor(tile));
    for (int mm = 0; mm < int(size<1>(fragment)); ++mm)
      for (int v1 = 0; v1 < 2; ++v1)
        for (int v2 = 0; v2 < 8; ++v2)
          for (int v0 = 0; v0 < 2; ++v0) {
            const auto gate = coords(hopscore_cutlass::gate_value(v0, v1, v2, mm));
            const auto up = coords(hopscore_cutlass::up_value(v0, v1, v2, mm));
            const int row = get<0>(gate), col = get<1>(gate);
            if (row < 0 || row >= rows || col < 0 || col >= hopscore_cutlass::kGatedBlock || get<0>(up) != row ||
                get<1>(up) != col + hopscore_cutlass::kGatedBlock) {
              ++errors;
              continue;
            }
            ++seen[row][col];
            ++seen[row][col + hopscore_cutlass::kGatedBlock];
          }
  }
  for (const auto& row : seen)
    for (int n : row) errors += n != 1;
  return errors;
}

// The norm kernels' epilogue walks each thread's accumulators as 4 rows of a quarter tile
// (norm_value in gemm_add_norm.cuh) and completes a row's sum over the 4 lanes of a
// quad. Checked here against CUTLASS's partitioning of the tile of each width, as the
// gated pairing above: every value of a (thread, row) pair in that row, each row held
// by the lanes of one quad only, which agree on where it is among their 4, and every
// cell of the tile held once. Returns the number of violations.
namespace {
template <int kWidth>
int norm_layout_errors() {
  using namespace cute;
  using namespace hopscore_cutlass;
  using Kernel = typename AddNorm<cutlass::bfloat16_t, kWidth>::Kernel;
  constexpr int cols = NormTile<kWidth>::kCols, values = NormTile<kWidth>::kValuesPerRow;
  typename Kernel::TiledMma mma;
  const auto tile = take<0, 2>(typename Kernel::TileShape{});
  static int seen[kTileRows][cols];
  std::memset(seen, 0, sizeof(seen));
  int quad_of_row[kTileRows];
  for (int& q : quad_of_row) q = -1;
  int errors = int(size(mma)) != 128;
  int rows_of[128][kRowsPerThread];
  for (int t = 0; t < 128; ++t) {
    const auto coords = mma.get_thread_slice(t).partition_C(make_identity_tensor(tile));
    for (int i = 0; i < kRowsPerThread; ++i) {
      const int row = get<0>(coords(norm_value(i, 0)));
      rows_of[t][i] = row;
      if (row < 0 || row >= kTileRows) {
        ++errors;
        continue;
      }
      if (quad_of_row[row] == -1) quad_of_row[row] = t / 4;
      errors += quad_of_row[row] != t / 4;
      for (int j = 0; j < values; ++j) {
        const auto cell = coords(norm_value(i, j));
        const int col = get<1>(cell);
        if (get<0>(cell) != row || col < 0 || col >= cols) {
          ++errors;
          continue;
        }
        ++seen[row][col];
      }
    }
  }
  for (int t = 0; t < 128; ++t)
    for (int i = 0; i < kRowsPerThread; ++i) errors += rows_of[t][i] != rows_of[t & ~3][i];
  for (const auto& row : seen)
    for (int n : row) errors += n != 1;
  return errors;
}
}  // namespace

extern "C" int hopscore_gemm_norm_layout_errors() {
  return norm_layout_errors<1024>() + norm_layout_errors<768>();
}

// nvcc registers this file's (empty) device image from a static constructor; with no
// CUDA runtime linked there is nothing to register it with. Hidden: no other library
// sees these.
#define HOPSCORE_NO_RUNTIME extern "C" __attribute__((weak, visibility("hidden")))
HOPSCORE_NO_RUNTIME void** __cudaRegisterFatBinary(void*) { return nullptr; }
HOPSCORE_NO_RUNTIME void __cudaRegisterFatBinaryEnd(void**) {}
HOPSCORE_NO_RUNTIME void __cudaUnregisterFatBinary(void**) {}
HOPSCORE_NO_RUNTIME void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}
