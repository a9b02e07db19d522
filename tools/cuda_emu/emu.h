// hopscore CUDA CPU emulator: the device-side half.
//
// Force-included (g++ -include tools/cuda_emu/emu.h) before every kernels/*.cu, which
// is then compiled as plain C++20 and linked into the fake libcuda.so built by
// tools/cuda_emu/build.sh. It supplies the CUDA language extensions, builtins,
// intrinsics and half types that the kernels use, and models of the mma.sync,
// ldmatrix and cp.async instructions behind kernels/common.cuh; the scheduler that
// runs every CUDA thread of a block as a cooperative fiber lives in driver.cpp.
//
// Semantics:
// - blocks run one at a time, so `__shared__` is `static` (function-static storage is
//   the block's shared memory; it keeps the previous block's values, like real shared
//   memory keeps garbage);
// - every CUDA thread is a fiber; it runs until a sync point (__syncthreads, a warp
//   collective, mma, ldmatrix) or its end, so the kernel code sees exactly
//   the synchronisation it asked for and nothing more;
// - warp collectives require the full mask (0xffffffff), as kernels/common.cuh says.
#pragma once
#ifndef HOPSCORE_CUDA_EMU
#define HOPSCORE_CUDA_EMU 1
#endif
// Kernels are "device code" here, for the PTX baseline of build.rs (compute_80).
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 800
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <assert.h>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <array>
#include <functional>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------- language extensions
#define __global__
#define __device__
#define __host__
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline
#define __shared__ static
#define __constant__ static
#define __managed__
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
// __restrict__ is already a g++ keyword.

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
typedef dim3 uint3;

struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(8))) uint2 { unsigned x, y; };
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline int2 make_int2(int x, int y) { return int2{x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

// The driver's side of the kernels, inside libcuda.so only: hidden, so that a kernel's
// calls (lane_id, the barriers: its hot path) are direct, not through the PLT.
#pragma GCC visibility push(hidden)
// Set by the scheduler (driver.cpp) before it switches into each fiber.
extern dim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr int warpSize = 32;

namespace hopscore_emu {
// driver.cpp
void block_barrier();             // __syncthreads
int block_barrier_count(int pred);  // __syncthreads_count: barrier + number of true predicates
void warp_barrier();              // all live lanes of the caller's warp
unsigned lane_id();
uint64_t* warp_exchange_buffer();  // 32 slots for the caller's warp
constexpr unsigned kWideWords = 8;   // 64-bit words per lane in a wide exchange
uint64_t* warp_wide_buffer();      // 32 × kWideWords for the caller's warp's next wide exchange
void async_copy_16(void* dst, const void* src, unsigned src_bytes);  // cp.async (queued)
void async_commit();                // cp.async.commit_group
void async_wait(unsigned pending);  // cp.async.wait_group
// wgmma (sm_90a): ops queue per thread and run at the wait that completes their group.
// Offsets are from the start of dynamic shared memory (1024-byte aligned, as the shared
// window's address 0 is), so a swizzle of address bits is a swizzle of these offsets.
struct WgmmaOperand {
  const unsigned char* smem;  // dynamic shared memory
  unsigned start;             // offset of the matrix's first element
  unsigned lbo, sbo;          // leading and stride byte offsets (kernels/wgmma.cuh)
  unsigned swizzle;           // swizzle span in bytes: 0 (none), 32, 64 or 128
  unsigned cap;               // bytes of dynamic shared memory (reads past it are fatal)
};
void wgmma_enqueue(std::function<void()> op);
void wgmma_commit();
void wgmma_wait(unsigned pending);
uint64_t wgmma_desc(const void* smem, unsigned lbo, unsigned sbo, unsigned swizzle);
WgmmaOperand wgmma_operand(uint64_t desc);
// The byte offset of a 16-byte chunk after the swizzle of `span` bytes (PTX ISA, "Shared
// Memory Matrix Layout"; CuTe's Swizzle<log2(span / 16), 4, 3>): address bits [4, 4 + b)
// XORed with bits [7, 7 + b), b = 1, 2, 3 for 32, 64, 128 bytes. TMA writes and wgmma
// reads through the same function.
inline unsigned swizzled(unsigned offset, unsigned span) {
  const unsigned mask = span ? span / 16 - 1 : 0;
  return offset ^ (((offset >> 7) & mask) << 4);
}
// mbarrier and TMA (sm_90a; kernels/tma.cuh). A barrier's state lives in the driver,
// keyed by its address, from `mbarrier_init` to the end of the block.
void mbarrier_init(void* bar, unsigned count);
void mbarrier_arrive(void* bar, unsigned expect_tx_bytes);
void mbarrier_wait(void* bar, unsigned parity);
// cp.async.bulk.tensor (tile mode) of the box at `coords` of the tensor map at `map` into
// `dst`, completing `bytes` of the transaction count of `bar`.
void tma_load(void* dst, const void* map, const int* coords, unsigned rank, void* bar);
void setmaxnreg(unsigned count, bool increase);
void named_barrier(unsigned id, unsigned threads, bool wait);  // bar.sync (wait) / bar.arrive
unsigned smem_offset(const void* p);  // offset in dynamic shared memory (fatal outside it)
unsigned warp_live_mask();         // lanes of the caller's warp that exist and have not exited
void* dynamic_smem();
[[noreturn]] void fatal(const char* what);

typedef void (*Trampoline)(void** params);
// `sizes[i]` is the byte size of parameter i (a graph node copies the values at capture).
void register_kernel(const char* name, Trampoline t, const size_t* sizes, size_t count);
#pragma GCC visibility pop
struct Registrar {
  Registrar(const char* name, Trampoline t, const size_t* sizes, size_t count) {
    register_kernel(name, t, sizes, count);
  }
};

template <auto F> struct Entry;
template <typename... A, void (*F)(A...)> struct Entry<F> {
  template <size_t... I> static void call_impl(void** p, std::index_sequence<I...>) {
    F(*static_cast<std::decay_t<A>*>(p[I])...);
  }
  static void call(void** params) { call_impl(params, std::index_sequence_for<A...>{}); }
  static constexpr size_t count = sizeof...(A);
  static constexpr size_t sizes[sizeof...(A) + 1] = {sizeof(std::decay_t<A>)..., 0};
};

// The compiler must not keep shared (static) memory in registers across a sync point.
inline void clobber() { asm volatile("" ::: "memory"); }

inline void check_mask(unsigned mask) {
  if (mask != 0xffffffffu) fatal("warp collective with a mask other than 0xffffffff (unsupported)");
}

template <typename T> inline uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "warp collective on a type over 8 bytes");
  uint64_t b = 0;
  memcpy(&b, &v, sizeof(T));
  return b;
}
template <typename T> inline T from_bits(uint64_t b) {
  T v;
  memcpy(&v, &b, sizeof(T));
  return v;
}

// Every lane publishes `v`, then reads the slot `src(lane)` (or its own when src < 0).
template <typename T, typename Src> inline T exchange(T v, Src src) {
  clobber();
  uint64_t* buf = warp_exchange_buffer();
  const unsigned lane = lane_id();
  buf[lane] = to_bits(v);
  warp_barrier();
  const int s = src(lane);
  T r = s < 0 ? v : from_bits<T>(buf[s]);
  warp_barrier();
  clobber();
  return r;
}
}  // namespace hopscore_emu

#define HOPSCORE_ENTRY(name) \
  static ::hopscore_emu::Registrar hopscore_emu_entry_##name(#name, &::hopscore_emu::Entry<&name>::call, \
                                                              ::hopscore_emu::Entry<&name>::sizes,       \
                                                              ::hopscore_emu::Entry<&name>::count)
#define HOPSCORE_DYNAMIC_SMEM(type, name) type* name = reinterpret_cast<type*>(::hopscore_emu::dynamic_smem())

// ---------------------------------------------------------------- synchronisation
inline void __syncthreads() {
  hopscore_emu::clobber();
  hopscore_emu::block_barrier();
  hopscore_emu::clobber();
}
inline int __syncthreads_count(int pred) {
  hopscore_emu::clobber();
  const int r = hopscore_emu::block_barrier_count(pred);
  hopscore_emu::clobber();
  return r;
}
inline int __syncthreads_or(int pred) { return __syncthreads_count(pred) != 0; }
inline int __syncthreads_and(int pred) { return __syncthreads_count(!pred) == 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  hopscore_emu::check_mask(mask);
  hopscore_emu::clobber();
  hopscore_emu::warp_barrier();
  hopscore_emu::clobber();
}
inline void __threadfence() { hopscore_emu::clobber(); }
inline void __threadfence_block() { hopscore_emu::clobber(); }
inline unsigned __activemask() { return 0xffffffffu; }

template <typename T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  hopscore_emu::check_mask(mask);
  return hopscore_emu::exchange(v, [&](unsigned lane) {
    return int((lane & ~unsigned(width - 1)) + (unsigned(src) & unsigned(width - 1)));
  });
}
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  hopscore_emu::check_mask(mask);
  return hopscore_emu::exchange(v, [&](unsigned lane) {
    const unsigned s = lane ^ unsigned(lane_mask);
    const unsigned seg = lane & ~unsigned(width - 1);
    return s >= seg + unsigned(width) || s >= 32 ? -1 : int(s);
  });
}
template <typename T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  hopscore_emu::check_mask(mask);
  return hopscore_emu::exchange(v, [&](unsigned lane) {
    return (lane & unsigned(width - 1)) + delta >= unsigned(width) ? -1 : int(lane + delta);
  });
}
template <typename T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  hopscore_emu::check_mask(mask);
  return hopscore_emu::exchange(v, [&](unsigned lane) {
    return (lane & unsigned(width - 1)) < delta ? -1 : int(lane - delta);
  });
}
// Ballot: every lane publishes its predicate, then each reduces the slots of the live
// lanes (lanes that do not exist or have exited count as 0).
inline unsigned __ballot_sync(unsigned mask, int pred) {
  hopscore_emu::check_mask(mask);
  hopscore_emu::clobber();
  uint64_t* buf = hopscore_emu::warp_exchange_buffer();
  buf[hopscore_emu::lane_id()] = pred ? 1 : 0;
  hopscore_emu::warp_barrier();
  const unsigned live = hopscore_emu::warp_live_mask();
  unsigned r = 0;
  for (unsigned i = 0; i < 32; ++i)
    if (((live >> i) & 1u) && buf[i] == 1) r |= 1u << i;
  hopscore_emu::warp_barrier();
  hopscore_emu::clobber();
  return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, !pred) == 0; }

// ---------------------------------------------------------------- atomics
// Blocks are sequential and fibers cooperative: plain read-modify-write is atomic.
template <typename T> inline T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }
template <typename T> inline T atomicSub(T* p, T v) { T o = *p; *p = o - v; return o; }
template <typename T> inline T atomicMax(T* p, T v) { T o = *p; *p = o < v ? v : o; return o; }
template <typename T> inline T atomicMin(T* p, T v) { T o = *p; *p = v < o ? v : o; return o; }
template <typename T> inline T atomicExch(T* p, T v) { T o = *p; *p = v; return o; }
template <typename T> inline T atomicCAS(T* p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }
template <typename T> inline T atomicOr(T* p, T v) { T o = *p; *p = o | v; return o; }
template <typename T> inline T atomicAnd(T* p, T v) { T o = *p; *p = o & v; return o; }

// ---------------------------------------------------------------- math and bits
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
template <typename A, typename B> inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>) return fmax(C(a), C(b));
  else return C(a) < C(b) ? C(b) : C(a);
}
template <typename A, typename B> inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<C>) return fmin(C(a), C(b));
  else return C(b) < C(a) ? C(b) : C(a);
}
inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
template <typename T> inline T __ldg(const T* p) { return *p; }

// ---------------------------------------------------------------- half types
struct __nv_bfloat16;
struct __half;
namespace hopscore_emu {
inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);  // quiet NaN, sign kept
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_bits_to_f32(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_f16_bits(float f) {
  _Float16 h = (_Float16)f;
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}
inline float f16_bits_to_f32(uint16_t b) {
  _Float16 h;
  memcpy(&h, &b, 2);
  return (float)h;
}
}  // namespace hopscore_emu

struct __attribute__((aligned(2))) __nv_bfloat16 {
  uint16_t __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(hopscore_emu::f32_to_bf16_bits(f)) {}
  __nv_bfloat16(double f) : __x(hopscore_emu::f32_to_bf16_bits(float(f))) {}
  __nv_bfloat16(int f) : __x(hopscore_emu::f32_to_bf16_bits(float(f))) {}
  operator float() const { return hopscore_emu::bf16_bits_to_f32(__x); }
};
struct __attribute__((aligned(2))) __half {
  uint16_t __x;
  __half() = default;
  __half(float f) : __x(hopscore_emu::f32_to_f16_bits(f)) {}
  __half(double f) : __x(hopscore_emu::f32_to_f16_bits(float(f))) {}
  __half(int f) : __x(hopscore_emu::f32_to_f16_bits(float(f))) {}
  operator float() const { return hopscore_emu::f16_bits_to_f32(__x); }
};
typedef __nv_bfloat16 nv_bfloat16;
typedef __half half;
struct __attribute__((aligned(4))) __nv_bfloat162 { __nv_bfloat16 x, y; };
struct __attribute__((aligned(4))) __half2 { __half x, y; };
typedef __nv_bfloat162 nv_bfloat162;
typedef __half2 half2;

inline __nv_bfloat16 __float2bfloat16(float f) { __nv_bfloat16 r; r.__x = hopscore_emu::f32_to_bf16_bits(f); return r; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return hopscore_emu::bf16_bits_to_f32(h.__x); }
inline __half __float2half(float f) { __half r; r.__x = hopscore_emu::f32_to_f16_bits(f); return r; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline float __half2float(__half h) { return hopscore_emu::f16_bits_to_f32(h.__x); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return {__bfloat162float(v.x), __bfloat162float(v.y)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 v) { return __floats2bfloat162_rn(v.x, v.y); }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half(a), __float2half(b)}; }
inline float2 __half22float2(__half2 v) { return {__half2float(v.x), __half2float(v.y)}; }
inline __half2 __float22half2_rn(float2 v) { return __floats2half2_rn(v.x, v.y); }
inline float __low2float(__half2 v) { return __half2float(v.x); }
inline float __high2float(__half2 v) { return __half2float(v.y); }
inline float __low2float(__nv_bfloat162 v) { return __bfloat162float(v.x); }
inline float __high2float(__nv_bfloat162 v) { return __bfloat162float(v.y); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { __nv_bfloat16 r; r.__x = b; return r; }
inline __half __ushort_as_half(unsigned short b) { __half r; r.__x = b; return r; }

// Scalar half arithmetic: computed in float, rounded once (what the hardware does for
// a single add/mul/fma of two halves).
#define HOPSCORE_EMU_HALF_OPS(T)                                                          \
  inline T __hadd(T a, T b) { return T(float(a) + float(b)); }                            \
  inline T __hsub(T a, T b) { return T(float(a) - float(b)); }                            \
  inline T __hmul(T a, T b) { return T(float(a) * float(b)); }                            \
  inline T __hdiv(T a, T b) { return T(float(a) / float(b)); }                            \
  inline T __hneg(T a) { T r = a; r.__x ^= 0x8000u; return r; }                          \
  inline T __habs(T a) { T r = a; r.__x &= 0x7fffu; return r; }                          \
  inline T __hfma(T a, T b, T c) { return T(fmaf(float(a), float(b), float(c))); }        \
  inline T __hmax(T a, T b) { return T(fmaxf(float(a), float(b))); }                     \
  inline T __hmin(T a, T b) { return T(fminf(float(a), float(b))); }                     \
  inline bool __hlt(T a, T b) { return float(a) < float(b); }                             \
  inline bool __hgt(T a, T b) { return float(a) > float(b); }                             \
  inline bool __heq(T a, T b) { return float(a) == float(b); }                            \
  inline bool __hisnan(T a) { return std::isnan(float(a)); }
HOPSCORE_EMU_HALF_OPS(__half)
HOPSCORE_EMU_HALF_OPS(__nv_bfloat16)
#undef HOPSCORE_EMU_HALF_OPS

// ---------------------------------------------------------------- mma.sync, ldmatrix, cp.async
// The PTX instructions behind the wrappers of kernels/common.cuh (mma_16816,
// ldmatrix_x*, cp_async_*), with the register contents each lane holds on a GPU, so
// that code which builds or reads fragments by lane is checked here. Every lane
// publishes its operands in a wide exchange (one warp barrier), then computes its own
// results from the lanes whose values the PTX ISA assigns to it.
namespace hopscore_emu {
template <typename T> inline float half_bits_to_f32(uint32_t bits);
template <> inline float half_bits_to_f32<__nv_bfloat16>(uint32_t bits) { return bf16_bits_to_f32(uint16_t(bits)); }
template <> inline float half_bits_to_f32<__half>(uint32_t bits) { return f16_bits_to_f32(uint16_t(bits)); }

// Publishes `n` words of this lane, waits for the warp; returns the warp's buffer
// (lane l's words at [l * kWideWords, l * kWideWords + n)).
inline const uint64_t* warp_publish(const uint64_t* words, unsigned n) {
  clobber();
  uint64_t* buf = warp_wide_buffer();
  memcpy(buf + lane_id() * kWideWords, words, n * sizeof(uint64_t));
  warp_barrier();
  clobber();
  return buf;
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: d = A·B + c for
// A 16×16, B 16×8 (PTX ISA, "Warp-level Matrix Fragments for mma.m16n8k16 with
// floating point type"). With g = lane / 4 and t = lane % 4, a lane holds
//   A: a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..2t+1], a[2] = A[g][2t+8..2t+9],
//      a[3] = A[g+8][2t+8..2t+9]   (two 16-bit elements per register, lower column in
//      the low half);
//   B: b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g];
//   C, D: c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1].
// The products are exact in f32; the emulator adds them to c in k order.
template <typename T> inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const uint64_t mine[3] = {a[0] | uint64_t(a[1]) << 32, a[2] | uint64_t(a[3]) << 32, b[0] | uint64_t(b[1]) << 32};
  const uint64_t* buf = warp_publish(mine, 3);
  const unsigned lane = lane_id(), g = lane / 4, t = lane % 4;
  // This lane's rows g, g + 8 of A and columns 2t, 2t + 1 of B, decoded once from the
  // lanes that hold them: lane 4g + q has A's k = 2q, 2q + 1 in a[0] (row g) and a[1]
  // (row g + 8), k = 2q + 8, 2q + 9 in a[2] and a[3]; lane 4n + q has B's k = 2q,
  // 2q + 1 of column n in b[0], k = 2q + 8, 2q + 9 in b[1].
  float rows[2][16], cols[2][16];
  auto pair = [](uint64_t word, unsigned half, float* at) {
    const uint32_t r32 = uint32_t(word >> (32 * half));
    at[0] = half_bits_to_f32<T>(r32 & 0xffffu);
    at[1] = half_bits_to_f32<T>(r32 >> 16);
  };
  for (unsigned q = 0; q < 4; ++q) {
    const uint64_t* held = buf + (4 * g + q) * kWideWords;
    for (unsigned r = 0; r < 2; ++r) {
      pair(held[0], r, &rows[r][2 * q]);
      pair(held[1], r, &rows[r][2 * q + 8]);
    }
    for (unsigned n = 0; n < 2; ++n) {
      const uint64_t word = buf[(4 * (2 * t + n) + q) * kWideWords + 2];
      pair(word, 0, &cols[n][2 * q]);
      pair(word, 1, &cols[n][2 * q + 8]);
    }
  }
  // The four sums side by side, each still in k order.
  float s[4] = {d[0], d[1], d[2], d[3]};
  for (unsigned k = 0; k < 16; ++k)
    for (unsigned i = 0; i < 4; ++i) s[i] = fmaf(rows[i / 2][k], cols[i % 2][k], s[i]);
  for (unsigned i = 0; i < 4; ++i) d[i] = s[i];
  clobber();
}

// ldmatrix.sync.aligned.m8n8.x{1,2,4}{,.trans}.shared.b16 (PTX ISA, "Warp-level matrix
// load instruction: ldmatrix"): lanes 8m..8m+7 give the 16-byte-aligned addresses of
// rows 0..7 of matrix m; without .trans lane l receives row l / 4, elements 2(l % 4)
// and 2(l % 4) + 1 of each matrix (lower element in the low half); with .trans it
// receives column l / 4, rows 2(l % 4) and 2(l % 4) + 1.
template <int N, bool Trans> inline void ldmatrix(uint32_t (&r)[N], const void* row) {
  if (reinterpret_cast<uintptr_t>(row) & 15u) fatal("ldmatrix row address not 16-byte aligned");
  const uint64_t mine = reinterpret_cast<uintptr_t>(row);
  const uint64_t* buf = warp_publish(&mine, 1);
  const unsigned l = lane_id();
  auto at = [&](unsigned m, unsigned row_i, unsigned col) {
    const uint16_t* p = reinterpret_cast<const uint16_t*>(uintptr_t(buf[(8 * m + row_i) * kWideWords]));
    return uint32_t(p[col]);
  };
  for (int m = 0; m < N; ++m) {
    const unsigned lo = Trans ? at(m, 2 * (l % 4), l / 4) : at(m, l / 4, 2 * (l % 4));
    const unsigned hi = Trans ? at(m, 2 * (l % 4) + 1, l / 4) : at(m, l / 4, 2 * (l % 4) + 1);
    r[m] = lo | hi << 16;
  }
  // A second barrier: the rows are read now, and no lane of the warp may write them
  // (a plain store after the instruction) before every lane has.
  warp_barrier();
  clobber();
}

// The offset of element (mn, k) of a 16-bit wgmma operand (PTX ISA, "Shared Memory Matrix
// Layout"; CuTe's canonical GMMA layouts, T = 8 elements, E = span / 2):
//   no swizzle, K-major:  16·(mn % 8) + 2·(k % 8) + SBO·(mn / 8) + LBO·(k / 8)
//   no swizzle, MN-major: 2·(mn % 8) + 16·(k % 8) + SBO·(mn / 8) + LBO·(k / 8)
//   swizzled, K-major:    span·(mn % 8) + SBO·(mn / 8) + 2·k       (LBO unused)
//   swizzled, MN-major:   2·(mn % E) + LBO·(mn / E) + span·(k % 8) + SBO·(k / 8)
// from the start address, then the swizzle of the span.
inline unsigned wgmma_element(const WgmmaOperand& m, bool mn_major, unsigned mn, unsigned k) {
  const unsigned span = m.swizzle;
  unsigned off;
  if (span == 0) {
    off = (mn_major ? 2 * (mn % 8) + 16 * (k % 8) : 16 * (mn % 8) + 2 * (k % 8)) + m.sbo * (mn / 8) + m.lbo * (k / 8);
  } else if (mn_major) {
    off = 2 * (mn % (span / 2)) + m.lbo * (mn / (span / 2)) + span * (k % 8) + m.sbo * (k / 8);
  } else {
    off = span * (mn % 8) + m.sbo * (mn / 8) + 2 * k;
  }
  return swizzled(m.start + off, span);
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16} (PTX ISA, "Asynchronous
// Warpgroup Level Matrix Multiply-Accumulate"; the fragments and the
// shared-memory layouts are described in kernels/wgmma.cuh). A in registers (`a`) is
// exchanged within the warp now, as the instruction reads its registers at issue; the
// products are computed, and shared memory read, when the op's group is waited for.
// Each thread computes its own D elements: rows 16w + g (+ 8) of its warp w in the
// warpgroup, columns 8nb + 2t (+ 1), products exact in f32 summed in k order.
template <typename T, int N>
inline void wgmma(float (&d)[N / 2], const uint32_t* a, uint64_t da, uint64_t db, bool accumulate, bool trans_b) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma: N is a multiple of 8 up to 256");
  std::array<uint32_t, 128> regs{};  // with `a`: lane l's register r at 4l + r
  if (a != nullptr) {
    const uint64_t mine[2] = {a[0] | uint64_t(a[1]) << 32, a[2] | uint64_t(a[3]) << 32};
    const uint64_t* buf = warp_publish(mine, 2);
    for (unsigned l = 0; l < 32; ++l)
      for (unsigned r = 0; r < 4; ++r) regs[4 * l + r] = uint32_t(buf[l * kWideWords + r / 2] >> (32 * (r & 1)));
  }
  const bool from_regs = a != nullptr;
  const WgmmaOperand A = from_regs ? WgmmaOperand{} : wgmma_operand(da), B = wgmma_operand(db);
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned w = (linear / 32) % 4, g = (linear % 32) / 4, t = linear % 4;
  float* dp = d;
  wgmma_enqueue([=] {
    auto at = [&](const WgmmaOperand& m, bool mn_major, unsigned mn, unsigned k) {
      const unsigned byte = wgmma_element(m, mn_major, mn, k);
      if (byte + 2 > m.cap) fatal("wgmma reads past dynamic shared memory");
      uint16_t v;
      memcpy(&v, m.smem + byte, 2);
      return half_bits_to_f32<T>(v);
    };
    auto a_at = [&](unsigned row, unsigned k) {  // row of the warp's 16
      if (!from_regs) return at(A, false, 16 * w + row, k);
      const uint32_t reg = regs[4 * ((row % 8) * 4 + (k % 8) / 2) + (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)];
      return half_bits_to_f32<T>((k & 1) ? reg >> 16 : reg & 0xffffu);
    };
    for (unsigned nb = 0; nb < N / 8; ++nb)
      for (unsigned i = 0; i < 4; ++i) {
        const unsigned row = g + 8 * (i / 2), col = 8 * nb + 2 * t + (i & 1);
        float s = accumulate ? dp[4 * nb + i] : 0.0f;
        for (unsigned k = 0; k < 16; ++k) s = fmaf(a_at(row, k), at(B, trans_b, col, k), s);
        dp[4 * nb + i] = s;
      }
  });
  clobber();
}
}  // namespace hopscore_emu
