// What CUTLASS's collective-epilogue interface asks of a register-direct epilogue (one
// that writes D from the accumulators itself, run through CUTLASS's
// Sm90TmaWarpSpecializedAdapter as its DefaultEpilogue is) whose Params are its
// Arguments and that needs no workspace: written once for the epilogues of this folder
// (gemm_gated.cuh, gemm_add_norm.cuh), which add their shared storage, argument check
// and operator().
#pragma once
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>

namespace hopscore_cutlass {

template <class T, class ArgumentsT>
struct DirectEpilogue {
  using ElementC = void;
  using ElementD = T;
  using StrideC = cute::Stride<int64_t, cute::_1, int64_t>;
  using StrideD = StrideC;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  using Arguments = ArgumentsT;
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }

  CUTLASS_HOST_DEVICE explicit DirectEpilogue(Params const& params) : params_(params) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

 protected:
  Params params_;
};

}  // namespace hopscore_cutlass
