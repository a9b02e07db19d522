// tma_check: C[128][n] = A·B through the Hopper wrappers a warp-specialised kernel is
// built from (kernels/tma.cuh: mbarrier, TMA, setmaxnreg; kernels/wgmma.cuh: swizzled
// descriptors, both B majors), for the parity table of tests/gpu_parity.rs: a wrong
// swizzle, descriptor, phase parity or byte count, in the kernel's reading of the PTX
// ISA or in the emulator's model, fails there against a plain product, on the emulator
// and on a Hopper GPU alike. Launcher: src/backend/cuda/tensor_core_check.rs.
//
// hopscore-sass: sm_90a
//
// Warpgroup 0 is the producer (its registers given back by setmaxnreg.dec; one thread
// issues the loads): K tiles of 64 through a ring of 2 stages, each stage's A [128][64]
// and B tile loaded by TMA with the 128-byte swizzle, announced on the stage's `full`
// mbarrier. Warpgroups 1 and 2 are consumers (setmaxnreg.inc), rows 0..63 and 64..127:
// each waits for a stage to be full, multiplies it with wgmma, and arrives on its
// `empty` mbarrier, which the producer waits for before it loads the stage again.
// Mode bits: kMnMajor, B is [k][n] (C = A·B; MN-major tiles, two boxes of 64 columns for
// n = 128), else [n][k] (C = A·Bᵀ, K-major); kRegisters, A fragments are read by each
// lane from global memory (wgmma_rs, and the producer loads B alone), else A is loaded
// by TMA (wgmma_ss). Rows of A from `a_rows` on are outside the tensor and read as zero.
#include "common.cuh"
#include "params.cuh"

namespace {
#if defined(HOPSCORE_CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr unsigned kStages = 2, kTileK = 64, kRows = 128;
constexpr unsigned kRowBytes = kTileK * 2;             // one swizzled 128-byte row
constexpr unsigned kTileBytes = kRows * kRowBytes;     // A, or B with n ≤ 128
constexpr unsigned kAtomBytes = 8 * kRowBytes;         // the 128-byte swizzle's 8-row atom
constexpr unsigned kMnMajor = 1, kRegisters = 2;       // the mode bits

// Two consecutive 16-bit elements (the first in the low half) as one register.
template <typename T> __device__ __forceinline__ unsigned pair(const T* p) {
  return *reinterpret_cast<const unsigned*>(p);
}

template <typename T, int N, bool MnMajor>
__device__ void consume(const hopscore::TmaCheckParams<T>& p, unsigned char* tiles, unsigned long long* full,
                        unsigned long long* empty) {
  const unsigned row0 = 64 * (threadIdx.x / 128 - 1), lane = threadIdx.x % 32, w = threadIdx.x / 32 % 4;
  const unsigned g = lane / 4, t4 = lane % 4;
  const bool regs = p.mode & kRegisters;
  float acc[N / 2];
  for (unsigned t = 0; t < p.k / kTileK; ++t) {
    const unsigned s = t % kStages;
    unsigned char* a_s = tiles + 2 * kTileBytes * s;
    unsigned char* b_s = a_s + kTileBytes;
    hopscore::mbarrier_wait(full + s, t / kStages % 2);
    hopscore::wgmma_fence();
    for (unsigned ks = 0; ks < kTileK / 16; ++ks) {
      const bool accumulate = t > 0 || ks > 0;
      // K-major: row n of B at 128 n, the k16 step 32 bytes on; MN-major: row k at 128 k
      // (16 rows a step), the second 64 columns one tile half (8 KB) on.
      const unsigned long long db =
          MnMajor ? hopscore::wgmma_desc(b_s + 16 * kRowBytes * ks, kTileBytes / 2, kAtomBytes, 128)
                  : hopscore::wgmma_desc(b_s + 32 * ks, 16, kAtomBytes, 128);
      if (regs) {
        // mma_16816's A fragment of rows row0 + 16w + g (+ 8), columns 2t (+ 8) of the step.
        const unsigned r = row0 + 16 * w + g, col = kTileK * t + 16 * ks + 2 * t4;
        const T* r0 = p.a + (size_t)r * p.k + col;
        const T* r1 = r0 + (size_t)8 * p.k;
        const bool in0 = r < p.a_rows, in1 = r + 8 < p.a_rows;
        const unsigned a[4] = {in0 ? pair(r0) : 0u, in1 ? pair(r1) : 0u, in0 ? pair(r0 + 8) : 0u,
                               in1 ? pair(r1 + 8) : 0u};
        hopscore::wgmma_rs<T, N, MnMajor>(acc, a, db, accumulate);
      } else {
        const unsigned long long da = hopscore::wgmma_desc(a_s + kRowBytes * row0 + 32 * ks, 16, kAtomBytes, 128);
        hopscore::wgmma_ss<T, N, MnMajor>(acc, da, db, accumulate);
      }
    }
    hopscore::wgmma_commit();
    hopscore::wgmma_wait<0>();
    hopscore::mbarrier_arrive(empty + s);
  }
  for (unsigned nb = 0; nb < N / 8; ++nb)
    for (unsigned i = 0; i < 4; ++i)
      p.c[(row0 + 16 * w + g + 8 * (i / 2)) * N + 8 * nb + 2 * t4 + (i & 1)] = acc[4 * nb + i];
}

template <typename T, int N> __device__ void check(const hopscore::TmaCheckParams<T>& p) {
  HOPSCORE_DYNAMIC_SMEM(unsigned char, raw);
  unsigned char* tiles = raw + hopscore::smem_align_pad(raw, 1024);
  auto* full = reinterpret_cast<unsigned long long*>(tiles + kStages * 2 * kTileBytes);
  unsigned long long* empty = full + kStages;
  const bool mn_major = p.mode & kMnMajor, regs = p.mode & kRegisters;
  if (threadIdx.x == 0) {
    for (unsigned s = 0; s < kStages; ++s) {
      hopscore::mbarrier_init(full + s, 1);
      hopscore::mbarrier_init(empty + s, 2 * 128);
    }
    hopscore::mbarrier_init_fence();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    hopscore::setmaxnreg_dec<24>();
    if (threadIdx.x != 0) return;
    for (unsigned t = 0; t < p.k / kTileK; ++t) {
      const unsigned s = t % kStages;
      unsigned char* a_s = tiles + 2 * kTileBytes * s;
      unsigned char* b_s = a_s + kTileBytes;
      // A stage's first use passes (parity 1); later ones wait for its previous round.
      hopscore::mbarrier_wait(empty + s, (t / kStages + 1) % 2);
      hopscore::mbarrier_arrive_expect_tx(full + s, (regs ? 0 : kTileBytes) + N * kRowBytes);
      if (!regs) hopscore::tma_load_2d(a_s, &p.a_map, kTileK * t, 0, full + s);
      if (mn_major) {
        for (unsigned h = 0; h < N / 64; ++h) hopscore::tma_load_2d(b_s + h * kTileBytes / 2, &p.b_map, 64 * h, kTileK * t, full + s);
      } else {
        hopscore::tma_load_2d(b_s, &p.b_map, kTileK * t, 0, full + s);
      }
    }
    return;
  }
  hopscore::setmaxnreg_inc<240>();
  if (mn_major) {
    consume<T, N, true>(p, tiles, full, empty);
  } else {
    consume<T, N, false>(p, tiles, full, empty);
  }
}
#endif

template <typename T> __device__ __forceinline__ void run(const hopscore::TmaCheckParams<T>& p) {
#if defined(HOPSCORE_CUDA_EMU) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (p.n == 64) {
    check<T, 64>(p);
  } else {
    check<T, 128>(p);
  }
#else
  __trap();  // sm_90a only: the launcher checks the device
#endif
}
}  // namespace

extern "C" __global__ void __launch_bounds__(hopscore::geometry::TMA_CHECK_THREADS, 1)
    tma_check_bf16(const __grid_constant__ hopscore::TmaCheckParams<__nv_bfloat16> p) {
  run(p);
}
HOPSCORE_ENTRY(tma_check_bf16);
extern "C" __global__ void __launch_bounds__(hopscore::geometry::TMA_CHECK_THREADS, 1)
    tma_check_f16(const __grid_constant__ hopscore::TmaCheckParams<__half> p) {
  run(p);
}
HOPSCORE_ENTRY(tma_check_f16);
