// Hopper warpgroup MMA (wgmma, sm_90a): the wrappers behind disentangled_attention_v5.
// Part of common.cuh (included at its end), with the same rule: inline PTX on a GPU,
// the emulator's model of the instruction under HOPSCORE_CUDA_EMU (tools/cuda_emu/emu.h).
// The PTX exists only when compiling for sm_90a (`__CUDA_ARCH_FEAT_SM90_ALL`): a kernel
// that uses these wrappers compiles its body for sm_90a alone.
//
// wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16} (PTX ISA, "Asynchronous
// Warpgroup Level Matrix Multiply-Accumulate"): the 4 warps of a warpgroup (here the
// 128 threads of a block) compute D[64][N] = A[64][16] · B[16][N] (+ D when `accumulate`).
// Register fragments, with w the warp, g = lane / 4, t = lane % 4:
//   D: d[4nb + i] = D[16w + g + 8(i / 2)][8nb + 2t + i % 2]  (mma_16816's C, per 8 columns);
//   A in registers: the warp's 16 rows as mma_16816's A.
// Shared-memory operands by a 64-bit descriptor (`wgmma_desc`). Without swizzle,
// "core matrices" of 8 rows × 16 bytes stored as 128 contiguous bytes, element (mn, k)
// of a 16-bit matrix at
//   K-major  (trans 0): start + 16·(mn % 8) + SBO·(mn / 8) + 2·(k % 8) + LBO·(k / 8)
//   MN-major (trans 1): start + 2·(mn % 8) + SBO·(mn / 8) + 16·(k % 8) + LBO·(k / 8)
// (the canonical layouts ((8,m),(T,2k)):((1T,SBO),(1,LBO)) and
// ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)), T = 8 elements). With a swizzle of S bytes
// (32, 64 or 128: the rows a TMA load of the same swizzle writes), E = S / 2 elements:
//   K-major:  start + S·(mn % 8) + SBO·(mn / 8) + 2·k                  (LBO unused)
//   MN-major: start + 2·(mn % E) + LBO·(mn / E) + S·(k % 8) + SBO·(k / 8)
// then address bits [4, 7) XORed with bits [7, 10) (fewer for 64 and 32), so the 8-row
// atom of S·8 bytes is aligned to that size; the start steps by 32 bytes per k16 of a
// K-major row. The instruction runs
// asynchronously: `wgmma_fence` orders earlier register and shared-memory accesses
// before it, `wgmma_commit` closes a group, `wgmma_wait<N>` returns once at most N groups
// are pending; D and A must not be touched in between. Shared memory written by threads
// (cp.async, stores) is made visible to it by `fence_proxy_async` and a barrier.
#pragma once

namespace hopscore {

// The descriptor of a shared-memory operand at `smem` (16-byte aligned) with leading
// and stride byte offsets (above) and a swizzle of `swizzle` bytes (0: none).
__device__ __forceinline__ unsigned long long wgmma_desc(const void* smem, unsigned lbo, unsigned sbo,
                                                         unsigned swizzle = 0);

// The descriptor of the operand `bytes` (a multiple of 16) after `desc`'s: the address
// field is the low 14 bits of address / 16, and shared memory ends below 256 KB, so the
// sum does not carry out of it.
__device__ __forceinline__ unsigned long long wgmma_desc_add(unsigned long long desc, unsigned bytes) {
  return desc + (bytes >> 4);
}

#ifdef HOPSCORE_CUDA_EMU
__device__ __forceinline__ unsigned long long wgmma_desc(const void* smem, unsigned lbo, unsigned sbo,
                                                         unsigned swizzle) {
  return hopscore_emu::wgmma_desc(smem, lbo, sbo, swizzle);
}
__device__ __forceinline__ void wgmma_fence() { hopscore_emu::clobber(); }
__device__ __forceinline__ void fence_proxy_async() { hopscore_emu::clobber(); }
__device__ __forceinline__ void wgmma_commit() { hopscore_emu::wgmma_commit(); }
template <int N> __device__ __forceinline__ void wgmma_wait() { hopscore_emu::wgmma_wait(N); }
// D (+)= A · B, A (K-major) and B in shared memory, B K-major or (BMnMajor) MN-major.
template <typename T, int N, bool BMnMajor = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db,
                                         bool accumulate) {
  hopscore_emu::wgmma<T, N>(d, nullptr, da, db, accumulate, BMnMajor);
}
// D (+)= A · B, A in registers, B in shared memory, MN-major or (!BMnMajor) K-major.
template <typename T, int N, bool BMnMajor = true>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db,
                                         bool accumulate) {
  hopscore_emu::wgmma<T, N>(d, a, 0, db, accumulate, BMnMajor);
}
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ unsigned long long wgmma_desc(const void* smem, unsigned lbo, unsigned sbo,
                                                         unsigned swizzle) {
  const unsigned long long enc = 0x3ffffull;
  // Layout type (bits 62-63): 1, 2, 3 for the 128-, 64-, 32-byte swizzle.
  const unsigned long long layout = swizzle == 128 ? 1 : swizzle == 64 ? 2 : swizzle == 32 ? 3 : 0;
  return ((smem_addr(smem) & enc) >> 4) | ((lbo & enc) >> 4) << 16 | ((sbo & enc) >> 4) << 32 | layout << 62;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}

// The accumulator operands: "+f" of d[i .. i + 8).
#define HOPSCORE_D8(i)                                                                    \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define HOPSCORE_D32 HOPSCORE_D8(0), HOPSCORE_D8(8), HOPSCORE_D8(16), HOPSCORE_D8(24)
#define HOPSCORE_D64 HOPSCORE_D32, HOPSCORE_D8(32), HOPSCORE_D8(40), HOPSCORE_D8(48), HOPSCORE_D8(56)
// The register lists of 32 and 64 accumulators in the asm strings.
#define HOPSCORE_R32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define HOPSCORE_R64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
// `accumulate` becomes the predicate scale-d (0: D = A·B); scale-a = scale-b = 1.
#define HOPSCORE_WGMMA_PRED(P) "{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"

template <typename T, int N, bool BMnMajor = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], unsigned long long da, unsigned long long db,
                                         bool accumulate);
template <typename T, int N, bool BMnMajor = true>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long db,
                                         bool accumulate);

// wgmma_ss (imm-trans-a = 0) and wgmma_rs for one type, N and B major (imm-trans-b TB:
// 0 K-major, 1 MN-major); SS_AB / RS_AB name the operands after the N / 2 accumulators,
// *_P the predicate.
#define HOPSCORE_WGMMA_TB(T, PTX_TYPE, N, TB, R, DN, SS_AB, SS_P, RS_AB, RS_P)                             \
  template <>                                                                                           \
  __device__ __forceinline__ void wgmma_ss<T, N, (TB != 0)>(float (&d)[N / 2], unsigned long long da,           \
                                                     unsigned long long db, bool accumulate) {          \
    asm volatile(HOPSCORE_WGMMA_PRED(SS_P) "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE   \
                 "." PTX_TYPE " " R ", " SS_AB ", p, 1, 1, 0, " #TB ";\n}"                               \
                 : DN                                                                                   \
                 : "l"(da), "l"(db), "r"((unsigned)accumulate));                                        \
  }                                                                                                     \
  template <>                                                                                           \
  __device__ __forceinline__ void wgmma_rs<T, N, (TB != 0)>(float (&d)[N / 2], const unsigned (&a)[4],          \
                                                     unsigned long long db, bool accumulate) {          \
    asm volatile(HOPSCORE_WGMMA_PRED(RS_P) "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE   \
                 "." PTX_TYPE " " R ", " RS_AB ", p, 1, 1, " #TB ";\n}"                                  \
                 : DN                                                                                   \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"((unsigned)accumulate));     \
  }
// Both B majors (TB) of one type at N = 64 and 128 (the accumulator lists are passed
// unexpanded, so that each stays one macro argument).
#define HOPSCORE_WGMMA_64_TB(T, PTX_TYPE, TB) \
  HOPSCORE_WGMMA_TB(T, PTX_TYPE, 64, TB, HOPSCORE_R32, HOPSCORE_D32, "%32, %33", "%34", "{%32, %33, %34, %35}, %36", "%37")
#define HOPSCORE_WGMMA_128_TB(T, PTX_TYPE, TB) \
  HOPSCORE_WGMMA_TB(T, PTX_TYPE, 128, TB, HOPSCORE_R64, HOPSCORE_D64, "%64, %65", "%66", "{%64, %65, %66, %67}, %68", "%69")
#define HOPSCORE_WGMMA_64(T, PTX_TYPE) HOPSCORE_WGMMA_64_TB(T, PTX_TYPE, 0) HOPSCORE_WGMMA_64_TB(T, PTX_TYPE, 1)
#define HOPSCORE_WGMMA_128(T, PTX_TYPE) HOPSCORE_WGMMA_128_TB(T, PTX_TYPE, 0) HOPSCORE_WGMMA_128_TB(T, PTX_TYPE, 1)
HOPSCORE_WGMMA_64(__nv_bfloat16, "bf16")
HOPSCORE_WGMMA_128(__nv_bfloat16, "bf16")
HOPSCORE_WGMMA_64(__half, "f16")
HOPSCORE_WGMMA_128(__half, "f16")
#undef HOPSCORE_WGMMA_64
#undef HOPSCORE_WGMMA_128
#undef HOPSCORE_WGMMA_64_TB
#undef HOPSCORE_WGMMA_128_TB
#undef HOPSCORE_WGMMA_TB
#undef HOPSCORE_WGMMA_PRED
#undef HOPSCORE_R32
#undef HOPSCORE_R64
#undef HOPSCORE_D64
#undef HOPSCORE_D32
#undef HOPSCORE_D8
#endif

}  // namespace hopscore
