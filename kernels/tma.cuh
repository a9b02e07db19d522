// Hopper's asynchronous data movement and warp specialisation (sm_90a): mbarrier, TMA
// (cp.async.bulk.tensor) and setmaxnreg, the wrappers a producer/consumer kernel is built
// from. Part of common.cuh (included at its end) with the same rule: inline PTX on a
// GPU, the emulator's model of each instruction under HOPSCORE_CUDA_EMU
// (tools/cuda_emu/driver.cpp). The PTX exists only for sm_90a (`__CUDA_ARCH_FEAT_SM90_ALL`).
//
// mbarrier (PTX ISA, "Parallel Synchronization and Communication Instructions:
// mbarrier"): a 64-bit shared-memory object with a phase, a count of arrivals per phase
// and a transaction count in bytes. `mbarrier_init` sets the count (then
// `mbarrier_init_fence` and a barrier publish it); `mbarrier_arrive` is one arrival;
// `mbarrier_arrive_expect_tx` first raises the transaction count by the bytes a TMA load
// will complete. A phase completes when its arrivals and its bytes are all in;
// `mbarrier_wait(bar, parity)` returns once the phase of that parity has completed (the
// first phase has parity 0; a producer's first wait on a free buffer passes parity 1).
//
// TMA (PTX ISA, "cp.async.bulk.tensor"): `tma_load_2d` copies the box of a tensor map
// (`TmaMap`, made on the host by cuTensorMapEncodeTiled and passed in a
// `__grid_constant__` parameter) at element coordinates (c0 innermost, c1) into shared
// memory (128-byte aligned; 1024 for the 128-byte swizzle atom), row-major through the
// map's swizzle; elements outside the tensor read as zero. The box's bytes complete on
// `bar`'s transaction count.
//
// Named barriers (PTX ISA, "bar.sync", "bar.arrive"): `named_barrier_sync(id, threads)`
// waits until `threads` (a multiple of 32) threads have reached barrier `id` (1..15; 0 is
// __syncthreads): one warpgroup synchronises without the others.
// `named_barrier_arrive(id, threads)` counts the caller's warp among them without
// waiting: one warpgroup lets another go on (ping-pong scheduling).
//
// setmaxnreg (PTX ISA, "setmaxnreg"): every warp of a warpgroup moves the warpgroup's
// per-thread register count to N (a multiple of 8 in [24, 256]); `.inc` waits until the
// block's pool has the registers, which `.dec` of other warpgroups returns. The kernel
// declares `__launch_bounds__(threads, 1)`, so that its count at entry is 65536 / threads.
#pragma once

namespace hopscore {

// A CUtensorMap: 128 opaque bytes, 64-byte aligned.
struct __align__(64) TmaMap {
  unsigned long long opaque[16];
};

#ifdef HOPSCORE_CUDA_EMU
__device__ __forceinline__ unsigned smem_align_pad(const void* p, unsigned align) {
  return (align - hopscore_emu::smem_offset(p) % align) % align;
}
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned count) {
  hopscore_emu::mbarrier_init(bar, count);
}
__device__ __forceinline__ void mbarrier_init_fence() { hopscore_emu::clobber(); }
__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) { hopscore_emu::mbarrier_arrive(bar, 0); }
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  hopscore_emu::mbarrier_arrive(bar, bytes);
}
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
  hopscore_emu::mbarrier_wait(bar, parity);
}
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaMap* map, int c0, int c1, unsigned long long* bar) {
  const int coords[2] = {c0, c1};
  hopscore_emu::tma_load(dst, map, coords, 2, bar);
}
__device__ __forceinline__ void named_barrier_sync(unsigned id, unsigned threads) {
  hopscore_emu::named_barrier(id, threads, true);
}
__device__ __forceinline__ void named_barrier_arrive(unsigned id, unsigned threads) {
  hopscore_emu::named_barrier(id, threads, false);
}
template <unsigned N> __device__ __forceinline__ void setmaxnreg_inc() { hopscore_emu::setmaxnreg(N, true); }
template <unsigned N> __device__ __forceinline__ void setmaxnreg_dec() { hopscore_emu::setmaxnreg(N, false); }
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Bytes from `p` (shared memory) to the next multiple of `align` of the shared window.
__device__ __forceinline__ unsigned smem_align_pad(const void* p, unsigned align) {
  return (align - smem_addr(p) % align) % align;
}
__device__ __forceinline__ void mbarrier_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbarrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_wait(unsigned long long* bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaMap* map, int c0, int c1, unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<unsigned long long>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar))
      : "memory");
}
__device__ __forceinline__ void named_barrier_sync(unsigned id, unsigned threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(unsigned id, unsigned threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
template <unsigned N> __device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <unsigned N> __device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}
#endif

}  // namespace hopscore
