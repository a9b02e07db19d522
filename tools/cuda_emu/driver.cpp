// hopscore CUDA CPU emulator: a fake CUDA driver (libcuda.so) for cudarc's
// `dynamic-loading`, plus the block scheduler that runs the kernels compiled from
// kernels/*.cu as C++ (see emu.h and README.md).
//
// Everything is synchronous: a launch runs all its blocks before cuLaunchKernel
// returns, copies are memcpy, streams and events are bookkeeping, except on a stream
// being captured: there launches, copies, memsets (and cuBLASLt matmuls, through
// `hopscore_emu_capture`) are recorded as graph nodes, run by cuGraphLaunch. Device pointers are
// host addresses. Blocks run one at a time; inside a block every CUDA thread is a
// cooperative fiber (own 256 KB stack) that runs until a sync point or its end.
// Before emu.h, whose `__noinline__` macro breaks libstdc++'s use of that attribute.
#include <functional>
#include <memory>

#include "emu.h"
#include "fatbin.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void* CUcontext;
typedef void* CUstream;
typedef void* CUevent;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUgraph;
typedef void* CUgraphExec;
typedef void (*CUhostFn)(void*);
typedef size_t (*CUoccupancyB2DSize)(int);
// cuLaunchKernelEx's configuration, laid out as cuda.h's; of the attributes only the
// cluster dimension (id 4) is read.
struct CUlaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    struct {
      unsigned x, y, z;
    } clusterDim;
  } value;
};
struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned numAttrs;
};
constexpr int CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4;

enum : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_FILE_NOT_FOUND = 301,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
  CUDA_ERROR_INVALID_CLUSTER_SIZE = 912,
  CUDA_ERROR_UNKNOWN = 999,
};
// CUevent_flags
constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;

// ============================================================ scheduler
dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace hopscore_emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr size_t kGuardBytes = 4096;
constexpr unsigned kMaxThreads = 1024;
constexpr size_t kDefaultSmem = 48 * 1024;
constexpr size_t kOptinSmem = 227 * 1024;
constexpr int kMultiprocessors = 2;

// AT_WAIT: blocked until `Fiber::ready` holds (an mbarrier phase, registers to take).
enum State : uint8_t { RUNNABLE, AT_BLOCK, AT_WARP, AT_WAIT, DONE };

// A pending cp.async: 16 bytes to `dst`, the first `src_bytes` read from `src` (the
// rest zero) when its group completes; `group` is the commit-group number it joins.
struct AsyncCopy {
  void* dst;
  const void* src;
  unsigned src_bytes;
  unsigned group;
};

struct Fiber {
  void* sp;
  State st;
  dim3 tid;
  unsigned linear;
  unsigned count_calls;  // __syncthreads_count calls made by this thread
  unsigned wide_calls;   // wide warp exchanges made (picks one of the two buffers)
  unsigned committed;    // cp.async groups committed (the open group's number)
  std::vector<AsyncCopy> async;  // cp.async copies not yet completed, in issue order
  unsigned wgmma_committed;  // wgmma groups committed (the open group's number)
  std::vector<std::pair<unsigned, std::function<void()>>> wgmma;  // (group, op) not yet run
  std::function<bool()> ready;  // AT_WAIT: the condition that releases the thread
  const char* waits_for;        // AT_WAIT: what it waits for (deadlock report)
};

// A TMA load queued on an mbarrier: it lands when the barrier's phase completes.
struct TmaCopy {
  std::function<void()> copy;  // null once done (copied at issue)
  unsigned bytes;
};

// An mbarrier (PTX ISA, "Parallel Synchronization and Communication Instructions:
// mbarrier"): the current phase, its pending arrivals (of `count` per phase) and its
// transaction count; a phase completes when both reach zero.
struct Mbarrier {
  unsigned count, pending, phase;
  long long tx;                 // bytes expected and not yet completed
  std::vector<TmaCopy> copies;  // issued TMA loads of the current phase
};

thread_local bool t_in_kernel = false;
struct sigaction g_old_segv, g_old_bus;
std::mutex g_launch_mutex;  // one launch at a time (tests call from several threads)
std::vector<Fiber> g_fibers;
char* g_stacks = nullptr;  // kMaxThreads slots of (guard page + stack)
void* g_sched_sp = nullptr;
int g_cur = -1;
Trampoline g_tramp = nullptr;
void** g_params = nullptr;
const char* g_kernel = nullptr;
std::vector<uint64_t> g_warp_buf;
std::vector<uint64_t> g_wide_buf;  // per warp: 2 alternating buffers of 32 × kWideWords
int g_count_slots[3];  // __syncthreads_count accumulators, used round-robin
unsigned char* g_smem = nullptr;
size_t g_smem_alloc = 0;  // capacity of g_smem
size_t g_smem_cap = 0;    // dynamic shared memory bytes of the current launch
constexpr size_t kSmemAlign = 1024;  // the shared window's start: swizzle atoms align
std::unordered_map<const void*, Mbarrier> g_mbarriers;  // the block's, by address
unsigned g_launch_regs = 0;          // registers per thread at launch (setmaxnreg's pool)
// bar.sync id, threads (id 1..15): threads arrived in the open round, and rounds completed.
struct NamedBarrier {
  unsigned arrived, rounds;
};
std::array<NamedBarrier, 16> g_named_barriers;
std::vector<unsigned> g_warpgroup_regs;  // each warpgroup's current count

// A compiled kernel: its trampoline and the byte size of each parameter.
struct Kernel {
  Trampoline tramp;
  std::vector<size_t> sizes;
};

std::map<std::string, Kernel>& registry() {
  static std::map<std::string, Kernel> r;
  return r;
}

}  // namespace
}  // namespace hopscore_emu

#if defined(__x86_64__)
// hopscore_emu_switch(save, to): saves callee-saved registers on the current stack,
// stores the stack pointer in *save, and resumes the context whose stack pointer is
// `to`. MXCSR and the x87 control word are not switched (loading the control word made
// half of a switch's time): a launch sets them once for all its fibers (`FpDefaults`),
// and neither the kernels nor the scheduler change them.
asm(R"(
  .text
  .globl hopscore_emu_switch
  .hidden hopscore_emu_switch
  .type hopscore_emu_switch,@function
hopscore_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  retq
  .size hopscore_emu_switch, .-hopscore_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");
extern "C" void hopscore_emu_switch(void** save, void* to);
#else
#error "tools/cuda_emu: the fiber switch is written for x86-64 only"
#endif

namespace hopscore_emu {
namespace {

[[noreturn]] void fiber_entry() {
  g_tramp(g_params);
  Fiber& f = g_fibers[g_cur];
  if (!f.wgmma.empty()) fatal("a thread exited with wgmma.mma_async not waited for (wgmma.wait_group)");
  f.st = DONE;
  f.ready = nullptr;
  hopscore_emu_switch(&f.sp, g_sched_sp);
  __builtin_unreachable();
}

void* fiber_initial_sp(unsigned i) {
  char* top = g_stacks + (size_t)(i + 1) * (kStackBytes + kGuardBytes);
  uint64_t* sp = reinterpret_cast<uint64_t*>(top);
  *--sp = 0;                                               // fake return address of fiber_entry
  *--sp = reinterpret_cast<uint64_t>(&fiber_entry);        // `ret` target
  for (int r = 0; r < 6; ++r) *--sp = 0;                   // rbp rbx r12 r13 r14 r15
  return sp;
}

// The default floating-point environment (MXCSR 0x1F80: round to nearest, no
// flush-to-zero, exceptions masked; x87 control word 0x037F) for the kernels of one
// launch, whatever the caller's; the caller's back at the end.
class FpDefaults {
 public:
  FpDefaults() {
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr_), "=m"(x87_));
    const uint32_t mxcsr = 0x1F80;
    const uint16_t x87 = 0x037F;
    asm volatile("ldmxcsr %0\n\tfldcw %1" : : "m"(mxcsr), "m"(x87));
  }
  ~FpDefaults() { asm volatile("ldmxcsr %0\n\tfldcw %1" : : "m"(mxcsr_), "m"(x87_)); }
  FpDefaults(const FpDefaults&) = delete;
  FpDefaults& operator=(const FpDefaults&) = delete;

 private:
  uint32_t mxcsr_;
  uint16_t x87_;
};

// A fault while this thread runs a kernel is reported with the kernel, block and thread
// (an out-of-bounds device access, or a fiber stack overflow into its guard page);
// any other fault goes to the previous handler (e.g. Rust's stack-overflow handler).
void on_fault(int sig, siginfo_t* si, void* uc) {
  if (t_in_kernel) {
    const char* addr = static_cast<const char*>(si->si_addr);
    const size_t slot = kStackBytes + kGuardBytes;
    const bool overflow = g_stacks && addr >= g_stacks && addr < g_stacks + slot * kMaxThreads &&
                          size_t(addr - g_stacks) % slot < kGuardBytes;
    fprintf(stderr,
            "cuda_emu: %s at address %p in kernel `%s`, block (%u,%u,%u), thread (%u,%u,%u)\n",
            overflow ? "FIBER STACK OVERFLOW (256 KB per CUDA thread)" : "INVALID MEMORY ACCESS (signal in kernel code)",
            si->si_addr, g_kernel ? g_kernel : "?", blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y,
            threadIdx.z);
    signal(SIGABRT, SIG_DFL);
    abort();
  }
  struct sigaction* old = sig == SIGSEGV ? &g_old_segv : &g_old_bus;
  if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
    old->sa_sigaction(sig, si, uc);
  } else if (old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
    old->sa_handler(sig);
  } else {
    sigaction(sig, old, nullptr);  // the fault repeats on return and takes the default action
  }
}

void ensure_stacks() {
  if (g_stacks) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_old_segv);
  sigaction(SIGBUS, &sa, &g_old_bus);
  const size_t slot = kStackBytes + kGuardBytes;
  void* p = mmap(nullptr, slot * kMaxThreads, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) fatal("cannot reserve fiber stacks");
  g_stacks = static_cast<char*>(p);
  for (unsigned i = 0; i < kMaxThreads; ++i) mprotect(g_stacks + i * slot, kGuardBytes, PROT_NONE);
}

void switch_to(unsigned i) {
  Fiber& f = g_fibers[i];
  threadIdx = f.tid;
  g_cur = int(i);
  hopscore_emu_switch(&g_sched_sp, f.sp);
  g_cur = -1;
}

Fiber& current(const char* what) {
  if (g_cur < 0) {
    fprintf(stderr, "cuda_emu: %s called outside a kernel launch\n", what);
    abort();
  }
  return g_fibers[g_cur];
}

[[noreturn]] void deadlock(unsigned n) {
  unsigned at_block = 0, at_warp = 0, at_wait = 0, done = 0;
  const char* waits_for = "";
  for (unsigned i = 0; i < n; ++i) {
    at_block += g_fibers[i].st == AT_BLOCK;
    at_warp += g_fibers[i].st == AT_WARP;
    done += g_fibers[i].st == DONE;
    if (g_fibers[i].st == AT_WAIT && at_wait++ == 0) waits_for = g_fibers[i].waits_for;
  }
  fprintf(stderr,
          "cuda_emu: DEADLOCK in kernel `%s`, block (%u,%u,%u) of %u threads: %u threads wait at "
          "__syncthreads, %u at a warp collective (shuffle/ballot/__syncwarp/mma/ldmatrix), %u at an mbarrier, "
          "a named barrier or setmaxnreg (the first of them at %s), "
          "%u have exited. A barrier is in divergent code (not reached by every live thread of the "
          "block/warp), or an mbarrier phase never completes (arrivals or transaction bytes short).\n",
          g_kernel, blockIdx.x, blockIdx.y, blockIdx.z, n, at_block, at_warp, at_wait,
          at_wait ? waits_for : "an mbarrier or setmaxnreg", done);
  abort();
}

void run_block(unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    g_fibers[i].st = RUNNABLE;
    g_fibers[i].sp = fiber_initial_sp(i);
  }
  if (g_smem_cap) memset(g_smem, 0xFF, g_smem_cap);
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = g_fibers[i];
    f.count_calls = f.wide_calls = f.committed = f.wgmma_committed = 0;
    f.async.clear();  // copies a previous block never waited for are dropped
    f.wgmma.clear();
    f.ready = nullptr;
  }
  g_mbarriers.clear();
  g_named_barriers = {};
  g_warpgroup_regs.assign((n + 127) / 128, g_launch_regs);
  g_count_slots[0] = g_count_slots[1] = g_count_slots[2] = 0;
  const unsigned warps = (n + 31) / 32;
  for (;;) {
    for (unsigned i = 0; i < n; ++i)
      if (g_fibers[i].st == RUNNABLE) switch_to(i);
    // Everyone is now blocked or done: release what can be released.
    bool released = false, any_live = false, all_at_block = true;
    for (unsigned i = 0; i < n; ++i) {
      Fiber& f = g_fibers[i];
      if (f.st == AT_WAIT && f.ready()) {
        f.st = RUNNABLE;
        f.ready = nullptr;
        released = true;
      }
    }
    for (unsigned w = 0; w < warps; ++w) {
      const unsigned lo = w * 32, hi = std::min(n, lo + 32);
      bool live = false, all_at_warp = true;
      for (unsigned i = lo; i < hi; ++i) {
        const State s = g_fibers[i].st;
        if (s == DONE) continue;
        live = true;
        if (s != AT_WARP) all_at_warp = false;
        if (s != AT_BLOCK) all_at_block = false;
      }
      any_live |= live;
      if (live && all_at_warp) {
        for (unsigned i = lo; i < hi; ++i)
          if (g_fibers[i].st == AT_WARP) g_fibers[i].st = RUNNABLE;
        released = true;
      }
    }
    if (!any_live) return;
    if (released) continue;
    if (all_at_block) {
      for (unsigned i = 0; i < n; ++i)
        if (g_fibers[i].st == AT_BLOCK) g_fibers[i].st = RUNNABLE;
      continue;
    }
    deadlock(n);
  }
}

}  // namespace

void block_barrier() {
  Fiber& f = current("__syncthreads");
  f.st = AT_BLOCK;
  hopscore_emu_switch(&f.sp, g_sched_sp);
}

// Call c of every thread adds to slot c % 3, and clears slot (c + 2) % 3 after the
// barrier: that slot is next written in call c + 2, after another barrier that every
// thread reaches only once it has cleared it.
int block_barrier_count(int pred) {
  Fiber& f = current("__syncthreads_count");
  const unsigned c = f.count_calls++;
  g_count_slots[c % 3] += pred ? 1 : 0;
  f.st = AT_BLOCK;
  hopscore_emu_switch(&f.sp, g_sched_sp);
  const int r = g_count_slots[c % 3];
  g_count_slots[(c + 2) % 3] = 0;
  return r;
}

void warp_barrier() {
  Fiber& f = current("a warp collective");
  f.st = AT_WARP;
  hopscore_emu_switch(&f.sp, g_sched_sp);
}

unsigned lane_id() { return current("lane_id").linear & 31u; }

uint64_t* warp_exchange_buffer() { return &g_warp_buf[(current("a warp collective").linear & ~31u)]; }

// Lanes of a warp make the same sequence of wide exchanges, so they agree on the
// buffer: exchange c uses buffer c % 2, and a lane can only write buffer c % 2 again
// (exchange c + 2) after every lane has passed exchange c + 1's barrier, that is after
// every lane has finished reading exchange c. One barrier per exchange suffices.
uint64_t* warp_wide_buffer() {
  Fiber& f = current("a warp collective");
  const unsigned parity = f.wide_calls++ & 1u;
  return &g_wide_buf[((f.linear >> 5) * 2 + parity) * 32 * kWideWords];
}

// HOPSCORE_CUDA_EMU_CP_ASYNC=issue: every cp.async copies when issued (the earliest
// moment), so a prefetch into a buffer that other threads still read shows; by default
// copies complete at the wait (the latest), so a read before the wait shows. CI runs the
// parity table both ways.
bool cp_async_at_issue() {
  static const bool at_issue = [] {
    const char* v = getenv("HOPSCORE_CUDA_EMU_CP_ASYNC");
    return v != nullptr && strcmp(v, "issue") == 0;
  }();
  return at_issue;
}

void async_copy_16(void* dst, const void* src, unsigned src_bytes) {
  Fiber& f = current("cp.async");
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15u)
    fatal("cp.async of 16 bytes with an address that is not 16-byte aligned");
  if (src_bytes > 16) fatal("cp.async with a source size over 16 bytes");
  if (cp_async_at_issue()) {
    memcpy(dst, src, src_bytes);
    memset(static_cast<char*>(dst) + src_bytes, 0, 16 - src_bytes);
    return;
  }
  f.async.push_back(AsyncCopy{dst, src, src_bytes, f.committed});
}

void async_commit() { ++current("cp.async.commit_group").committed; }

// Completes (in issue order) the copies of every committed group but the `pending`
// most recent ones: the latest moment the PTX ISA allows, so that a kernel reading a
// cp.async destination before its wait sees the old contents, as it may on a GPU.
void async_wait(unsigned pending) {
  Fiber& f = current("cp.async.wait_group");
  size_t kept = 0;
  for (const AsyncCopy& c : f.async) {
    if (c.group < f.committed && f.committed - c.group > pending) {
      memcpy(c.dst, c.src, c.src_bytes);
      memset(static_cast<char*>(c.dst) + c.src_bytes, 0, 16 - c.src_bytes);
    } else {
      f.async[kept++] = c;
    }
  }
  f.async.resize(kept);
}

// wgmma.mma_async: an op joins the open group and runs when `wgmma_wait` completes its
// group (the latest moment the PTX ISA allows: reading D, or overwriting a shared-memory
// operand, before the wait then shows on the emulator as it may on a GPU).
void wgmma_enqueue(std::function<void()> op) {
  Fiber& f = current("wgmma.mma_async");
  f.wgmma.emplace_back(f.wgmma_committed, std::move(op));
}

void wgmma_commit() { ++current("wgmma.commit_group").wgmma_committed; }

void wgmma_wait(unsigned pending) {
  Fiber& f = current("wgmma.wait_group");
  size_t kept = 0;
  for (auto& op : f.wgmma) {
    if (op.first < f.wgmma_committed && f.wgmma_committed - op.first > pending) {
      op.second();
    } else {
      f.wgmma[kept++] = std::move(op);
    }
  }
  f.wgmma.resize(kept);
}

// The descriptor of PTX's "Matrix Descriptor Format" with the operand's offset in the
// block's dynamic shared memory as its address (all wgmma operands live there).
// Layout type (bits 62-63) 1, 2, 3: 128-, 64-, 32-byte swizzle.
uint64_t wgmma_desc(const void* smem, unsigned lbo, unsigned sbo, unsigned swizzle) {
  const uint64_t off = smem_offset(smem);
  if ((off | lbo | sbo) & 15u) fatal("wgmma descriptor: address or byte offset not a multiple of 16");
  if (off > 0x3ffff || lbo > 0x3ffff || sbo > 0x3ffff) fatal("wgmma descriptor: a field over 18 bits");
  const uint64_t layout = swizzle == 128 ? 1 : swizzle == 64 ? 2 : swizzle == 32 ? 3 : 0;
  if (swizzle && !layout) fatal("wgmma descriptor: a swizzle of other than 32, 64 or 128 bytes");
  return off >> 4 | uint64_t(lbo >> 4) << 16 | uint64_t(sbo >> 4) << 32 | layout << 62;
}

WgmmaOperand wgmma_operand(uint64_t desc) {
  if ((desc >> 49) & 7u) fatal("wgmma descriptor with a base offset (not modelled: align the swizzle atom)");
  const unsigned off = unsigned(desc & 0x3fffu) << 4;
  if (off >= g_smem_cap) fatal("wgmma descriptor: start address past dynamic shared memory");
  static constexpr unsigned kSpan[4] = {0, 128, 64, 32};
  return WgmmaOperand{g_smem, off, unsigned((desc >> 16) & 0x3fffu) << 4, unsigned((desc >> 32) & 0x3fffu) << 4,
                      kSpan[desc >> 62], unsigned(g_smem_cap)};
}

unsigned smem_offset(const void* p) {
  const auto* b = static_cast<const unsigned char*>(p);
  if (b < g_smem || b >= g_smem + g_smem_cap) fatal("an address outside dynamic shared memory where one inside is needed");
  return unsigned(b - g_smem);
}

// ------------------------------------------------------------ mbarrier, TMA, setmaxnreg
namespace {
// Blocks the calling thread until `ready` holds (at once if it already does).
void wait_until(const char* what, std::function<bool()> ready) {
  if (ready()) return;
  Fiber& f = current(what);
  f.ready = std::move(ready);
  f.waits_for = what;
  f.st = AT_WAIT;
  hopscore_emu_switch(&f.sp, g_sched_sp);
  clobber();
}

Mbarrier& mbarrier_at(void* bar, const char* what) {
  auto it = g_mbarriers.find(bar);
  if (it == g_mbarriers.end()) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s on an address that no mbarrier.init of this block initialised", what);
    fatal(msg);
  }
  return it->second;
}

// Completes the phase once every arrival came and every expected byte landed: the
// queued TMA loads copy now, the latest moment the PTX ISA allows.
void try_complete(Mbarrier& m) {
  if (m.pending != 0) return;
  long long queued = 0;
  for (const TmaCopy& c : m.copies) queued += c.bytes;
  if (m.tx - queued > 0) return;
  if (m.tx - queued < 0) fatal("mbarrier: TMA loads complete more bytes than expect_tx announced");
  for (TmaCopy& c : m.copies)
    if (c.copy) c.copy();
  m.copies.clear();
  m.tx = 0;
  m.pending = m.count;
  ++m.phase;
}
}  // namespace

void mbarrier_init(void* bar, unsigned count) {
  if (reinterpret_cast<uintptr_t>(bar) & 7u) fatal("mbarrier.init: address not 8-byte aligned");
  if (count == 0 || count > (1u << 20) - 1) fatal("mbarrier.init: count outside [1, 2^20 - 1]");
  g_mbarriers[bar] = Mbarrier{count, count, 0, 0, {}};
}

// mbarrier.arrive(.expect_tx): the transaction count first grows by `expect_tx_bytes`.
void mbarrier_arrive(void* bar, unsigned expect_tx_bytes) {
  Mbarrier& m = mbarrier_at(bar, "mbarrier.arrive");
  if (m.pending == 0) fatal("mbarrier.arrive: more arrivals than the barrier's count in one phase");
  m.tx += expect_tx_bytes;
  --m.pending;
  try_complete(m);
}

// mbarrier.try_wait.parity in a loop: returns once the phase of this parity completed,
// that is while the current phase has the other parity.
void mbarrier_wait(void* bar, unsigned parity) {
  Mbarrier& m = mbarrier_at(bar, "mbarrier.try_wait.parity");
  wait_until("an mbarrier phase (mbarrier.try_wait.parity)", [&m, parity] { return (m.phase & 1u) != (parity & 1u); });
}

// setmaxnreg.{inc,dec}.sync.aligned.u32: every warp of a warpgroup sets the count; an
// increase waits until the block's pool (the launch's registers per thread × threads,
// `g_launch_regs`) holds it.
void setmaxnreg(unsigned count, bool increase) {
  Fiber& f = current("setmaxnreg");
  if (count < 24 || count > 256 || count % 8) fatal("setmaxnreg: count outside [24, 256] or not a multiple of 8");
  const unsigned wg = f.linear / 128;
  unsigned& mine = g_warpgroup_regs[wg];
  if (increase ? count < mine : count > mine) fatal("setmaxnreg: .inc below (or .dec above) the warpgroup's count");
  const size_t threads = g_fibers.size();
  // The first warp of the warpgroup to get here changes its count; the others pass.
  if ((f.linear & 127u) < 32 && count != mine) {
    wait_until("registers (setmaxnreg.inc)", [wg, count, threads] {
      size_t used = 0;
      for (size_t w = 0; w < g_warpgroup_regs.size(); ++w) used += size_t(w == wg ? count : g_warpgroup_regs[w]) * 128;
      return used <= size_t(g_launch_regs) * threads;
    });
    g_warpgroup_regs[wg] = count;
  }
  warp_barrier();
}

// bar.sync / bar.arrive id, threads: the last of `threads` arrivals completes the round;
// a bar.sync thread waits for its round to complete, a bar.arrive thread goes on at
// once. Every thread of a round must name the same count.
void named_barrier(unsigned id, unsigned threads, bool wait) {
  if (id == 0 || id > 15) fatal("bar.sync: barrier id outside 1..15 (0 is __syncthreads)");
  if (threads == 0 || threads % 32 || threads > g_fibers.size()) fatal("bar.sync: a thread count not a multiple of 32 within the block");
  NamedBarrier& b = g_named_barriers[id];
  const unsigned round = b.rounds;
  if (++b.arrived == threads) {
    b.arrived = 0;
    ++b.rounds;
    clobber();
    return;
  }
  if (!wait) return;
  wait_until("a named barrier (bar.sync)", [&b, round] { return b.rounds != round; });
}

// What the emulator's cuTensorMapEncodeTiled writes into a CUtensorMap's 128 bytes.
struct TensorMapImage {
  uint64_t magic;
  const unsigned char* global;
  uint64_t dims[5];     // elements, innermost first
  uint64_t strides[4];  // bytes between consecutive indices of dims 1..4
  uint16_t box[5];      // elements
  uint8_t rank, elem_bytes;
  uint16_t swizzle;     // span in bytes (0: none)
  uint8_t oob_nan;      // CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
};
static_assert(sizeof(TensorMapImage) <= 128, "a CUtensorMap is 128 bytes");
constexpr uint64_t kTensorMapMagic = 0x50414d54534f4821ull;  // "!HOSTMAP"

// cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes:
// the box at `coords` (innermost first; elements outside the tensor read as zero, or NaN
// with the NaN fill), row-major into `dst` through the map's swizzle; its bytes count
// against `bar`'s transaction count and land when the phase completes (at issue with
// HOPSCORE_CUDA_EMU_CP_ASYNC=issue).
void tma_load(void* dst, const void* map, const int* coords, unsigned rank, void* bar) {
  if (reinterpret_cast<uintptr_t>(map) & 63u) fatal("cp.async.bulk.tensor: tensor map not 64-byte aligned");
  const TensorMapImage t = *static_cast<const TensorMapImage*>(map);
  if (t.magic != kTensorMapMagic) fatal("cp.async.bulk.tensor: not a tensor map made by cuTensorMapEncodeTiled");
  if (rank != t.rank) fatal("cp.async.bulk.tensor: the instruction's dimension is not the tensor map's rank");
  const unsigned off = smem_offset(dst);
  if (off % 128) fatal("cp.async.bulk.tensor: shared-memory destination not 128-byte aligned");
  if (t.swizzle && t.box[0] * t.elem_bytes != t.swizzle)
    fatal("cp.async.bulk.tensor: a swizzled box whose inner size is not the swizzle span (not modelled)");
  Mbarrier& m = mbarrier_at(bar, "cp.async.bulk.tensor");
  size_t elems = 1;
  for (unsigned d = 0; d < rank; ++d) elems *= t.box[d];
  const unsigned bytes = unsigned(elems * t.elem_bytes);
  if (off + bytes > g_smem_cap) fatal("cp.async.bulk.tensor: the box runs past dynamic shared memory");
  std::array<long long, 5> at{};
  for (unsigned d = 0; d < rank; ++d) at[d] = coords[d];
  auto copy = [t, at, off, elems] {
    for (size_t e = 0; e < elems; ++e) {
      size_t rest = e;
      bool inside = true;
      const unsigned char* src = t.global;
      for (unsigned d = 0; d < t.rank; ++d) {
        const long long c = at[d] + (long long)(rest % t.box[d]);
        rest /= t.box[d];
        inside = inside && c >= 0 && (uint64_t)c < t.dims[d];
        src += inside ? (d == 0 ? c * t.elem_bytes : c * t.strides[d - 1]) : 0;
      }
      unsigned char* out = g_smem + swizzled(unsigned(off + e * t.elem_bytes), t.swizzle);
      if (inside) {
        memcpy(out, src, t.elem_bytes);
      } else {
        memset(out, t.oob_nan ? 0xff : 0, t.elem_bytes);
      }
    }
  };
  if (cp_async_at_issue()) {
    copy();
    m.copies.push_back(TmaCopy{nullptr, bytes});
  } else {
    m.copies.push_back(TmaCopy{copy, bytes});
  }
  try_complete(m);
}

unsigned warp_live_mask() {
  const unsigned lo = current("a warp collective").linear & ~31u;
  const unsigned hi = std::min<unsigned>(unsigned(g_fibers.size()), lo + 32);
  unsigned m = 0;
  for (unsigned i = lo; i < hi; ++i)
    if (g_fibers[i].st != DONE) m |= 1u << (i - lo);
  return m;
}

void* dynamic_smem() { return g_smem; }

void fatal(const char* what) {
  fprintf(stderr, "cuda_emu: %s (kernel `%s`, block (%u,%u,%u), thread (%u,%u,%u))\n", what,
          g_kernel ? g_kernel : "?", blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y, threadIdx.z);
  abort();
}

void register_kernel(const char* name, Trampoline t, const size_t* sizes, size_t count) {
  auto& r = registry();
  if (r.count(name) && r[name].tramp != t) {
    fprintf(stderr, "cuda_emu: kernel `%s` registered twice\n", name);
    abort();
  }
  r[name] = Kernel{t, std::vector<size_t>(sizes, sizes + count)};
}

}  // namespace hopscore_emu

// ============================================================ driver objects
namespace {
using namespace hopscore_emu;

struct Function {
  std::string name;
  Kernel kernel;
  int max_dynamic_smem = int(kDefaultSmem);
};
struct Module {
  std::set<std::string> entries;
  std::map<std::string, Function*> functions;
};
struct Event {
  std::chrono::steady_clock::time_point t{};
  bool recorded = false;
  bool timing = true;  // false with CU_EVENT_DISABLE_TIMING: no elapsed time, as a driver
};
// A graph: its nodes in stream order (a capture records one stream).
struct Graph {
  std::vector<std::function<CUresult()>> nodes;
};
struct Stream {
  Graph* capture = nullptr;  // set between cuStreamBeginCapture and cuStreamEndCapture
  bool invalidated = false;  // an unsupported call broke the capture
};

std::mutex g_mutex;  // allocations, modules
int g_primary_ctx = 0;
int g_primary_refs = 0;
thread_local void* t_ctx = nullptr;

constexpr size_t kTotalMem = 16ull << 30;
constexpr size_t kRedZone = 64;
constexpr unsigned char kRedByte = 0xAB;
std::unordered_map<uintptr_t, size_t> g_allocs;
size_t g_allocated = 0;

bool trace() {
  static const bool t = getenv("HOPSCORE_CUDA_EMU_TRACE") != nullptr;
  return t;
}

// ------------------------------------------------------------ stream capture
std::map<uintptr_t, size_t> g_pinned;  // page-locked host allocations (base → bytes), under g_mutex

bool is_pinned(const void* p, size_t n) {
  std::lock_guard<std::mutex> g(g_mutex);
  auto it = g_pinned.upper_bound(uintptr_t(p));
  if (it == g_pinned.begin()) return false;
  --it;
  return uintptr_t(p) + n <= it->first + it->second;
}

bool is_created(CUstream s) {
  return s && s != reinterpret_cast<CUstream>(0x1) && s != reinterpret_cast<CUstream>(0x2);
}

// The stream if it is being captured.
Stream* capturing(CUstream s) {
  if (!is_created(s)) return nullptr;
  auto* st = static_cast<Stream*>(s);
  return st->capture ? st : nullptr;
}

// A call a GPU refuses on a capturing stream: it fails and invalidates the capture.
CUresult refuse(Stream* st, const char* what) {
  fprintf(stderr, "cuda_emu: %s during stream capture is not allowed (as on a GPU)\n", what);
  st->invalidated = true;
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

// Runs `op` now, or records it when `s` is capturing.
CUresult run_or_record(CUstream s, std::function<CUresult()> op) {
  if (Stream* st = capturing(s)) {
    st->capture->nodes.push_back(std::move(op));
    return CUDA_SUCCESS;
  }
  return op();
}

CUresult alloc(CUdeviceptr* dptr, size_t bytes) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t body = (bytes + 255) / 256 * 256;
  void* p = aligned_alloc(256, body + 256);  // the red zone lives in the extra 256 bytes
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(static_cast<char*>(p) + bytes, kRedByte, kRedZone + (body - bytes));
  {
    std::lock_guard<std::mutex> g(g_mutex);
    g_allocs[uintptr_t(p)] = bytes;
    g_allocated += body;
  }
  *dptr = CUdeviceptr(uintptr_t(p));
  return CUDA_SUCCESS;
}

CUresult release(CUdeviceptr dptr) {
  if (dptr == 0) return CUDA_SUCCESS;
  size_t bytes;
  {
    std::lock_guard<std::mutex> g(g_mutex);
    auto it = g_allocs.find(uintptr_t(dptr));
    if (it == g_allocs.end()) {
      fprintf(stderr, "cuda_emu: cuMemFree of %#llx, which is not an allocation\n", dptr);
      return CUDA_ERROR_INVALID_VALUE;
    }
    bytes = it->second;
    g_allocs.erase(it);
    g_allocated -= (bytes + 255) / 256 * 256;
  }
  const unsigned char* p = reinterpret_cast<const unsigned char*>(uintptr_t(dptr));
  const size_t body = (bytes + 255) / 256 * 256;
  for (size_t i = bytes; i < body + kRedZone; ++i)
    if (p[i] != kRedByte) {
      fprintf(stderr,
              "cuda_emu: OUT-OF-BOUNDS WRITE detected when freeing a %zu-byte allocation at %#llx: byte %zu "
              "past its end was overwritten\n",
              bytes, dptr, i - bytes);
      abort();
    }
  free(reinterpret_cast<void*>(uintptr_t(dptr)));
  return CUDA_SUCCESS;
}

CUresult load_module(CUmodule* out, const char* image) {
  if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
  const auto* bytes = reinterpret_cast<const unsigned char*>(image);
  if (bytes[0] == 0x7f && image[1] == 'E' && image[2] == 'L' && image[3] == 'F') {
    fprintf(stderr, "cuda_emu: cuModuleLoadData given a bare cubin; the emulator reads fatbins and PTX text\n");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  if (fatbin::at<uint32_t>(bytes, 0) == 0x466243B1u) {
    fprintf(stderr, "cuda_emu: cuModuleLoadData given a fatbin wrapper; pass the fatbin it points to\n");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  fatbin::Chosen c = fatbin::choose(bytes);
  switch (c.result) {
    case fatbin::Load::NotFatbin: c.entries = fatbin::ptx_entries(image); c.what = "PTX text"; break;
    case fatbin::Load::Ok: break;
    case fatbin::Load::Invalid:
      fprintf(stderr, "cuda_emu: cuModuleLoadData: %s\n", c.what.c_str());
      return CUDA_ERROR_INVALID_IMAGE;
    case fatbin::Load::NoBinaryForGpu:
      if (trace()) fprintf(stderr, "cuda_emu: cuModuleLoadData: %s\n", c.what.c_str());
      return CUDA_ERROR_NO_BINARY_FOR_GPU;
    case fatbin::Load::UnsupportedPtx:
      if (trace()) fprintf(stderr, "cuda_emu: cuModuleLoadData: %s\n", c.what.c_str());
      return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
  }
  auto* m = new Module;
  m->entries = std::move(c.entries);
  if (trace()) fprintf(stderr, "cuda_emu: module %p from %s, %zu entries\n", (void*)m, c.what.c_str(), m->entries.size());
  *out = m;
  return CUDA_SUCCESS;
}

// HOPSCORE_CUDA_EMU_FAULT=<kernel>:hang|wrong|error[,...]: the named kernel (an entry,
// or an entry less its `_<dtype>` and other suffixes: `gemm_bias_gelu` names
// gemm_bias_gelu_bf16) spins forever, writes nothing and reports success (its output
// keeps whatever the buffer held: a wrong answer), or fails its launch
// (CUDA_ERROR_LAUNCH_FAILED); `nocluster` makes cuOccupancyMaxActiveClusters answer 0
// for it (no cluster fits: a setup failure). CUTLASS's stand-ins included: the engine's
// self-test and fallbacks are tested with it.
enum class Fault { None, Hang, Wrong, Error, NoCluster };

Fault fault_of(const std::string& kernel) {
  const char* spec = getenv("HOPSCORE_CUDA_EMU_FAULT");
  if (!spec) return Fault::None;
  std::string all(spec);
  size_t at = 0;
  while (at <= all.size()) {
    size_t end = all.find(',', at);
    if (end == std::string::npos) end = all.size();
    const std::string item = all.substr(at, end - at);
    at = end + 1;
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos) continue;
    const std::string name = item.substr(0, colon), kind = item.substr(colon + 1);
    if (kernel != name && kernel.rfind(name + "_", 0) != 0) continue;
    if (kind == "hang") return Fault::Hang;
    if (kind == "wrong") return Fault::Wrong;
    if (kind == "error") return Fault::Error;
    if (kind == "nocluster") return Fault::NoCluster;
    fprintf(stderr, "cuda_emu: HOPSCORE_CUDA_EMU_FAULT item `%s`: expected hang, wrong, error or nocluster\n",
            item.c_str());
  }
  return Fault::None;
}

CUresult launch(CUfunction fh, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                unsigned smem, void** params, void** extra) {
  auto* f = static_cast<Function*>(fh);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  switch (fault_of(f->name)) {
    case Fault::None:
    case Fault::NoCluster: break;
    case Fault::Hang:
      fprintf(stderr, "cuda_emu: `%s` hangs (HOPSCORE_CUDA_EMU_FAULT)\n", f->name.c_str());
      for (;;) sleep(1);
    case Fault::Wrong: return CUDA_SUCCESS;
    case Fault::Error:
      fprintf(stderr, "cuda_emu: `%s` fails its launch (HOPSCORE_CUDA_EMU_FAULT)\n", f->name.c_str());
      return CUDA_ERROR_LAUNCH_FAILED;
  }
  const unsigned long long threads = (unsigned long long)bx * by * bz;
  if (threads == 0 || gx == 0 || gy == 0 || gz == 0) {
    fprintf(stderr, "cuda_emu: launch of `%s` with an empty grid or block\n", f->name.c_str());
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (threads > kMaxThreads || bx > 1024 || by > 1024 || bz > 64 || gy > 65535 || gz > 65535) {
    fprintf(stderr, "cuda_emu: launch of `%s` with block (%u,%u,%u) / grid (%u,%u,%u) over the device limits\n",
            f->name.c_str(), bx, by, bz, gx, gy, gz);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (smem > kOptinSmem || smem > (unsigned)std::max<int>(f->max_dynamic_smem, int(kDefaultSmem))) {
    fprintf(stderr,
            "cuda_emu: launch of `%s` asks %u bytes of dynamic shared memory (limit %d without "
            "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, at most %zu)\n",
            f->name.c_str(), smem, std::max<int>(f->max_dynamic_smem, int(kDefaultSmem)), kOptinSmem);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!params) {
    if (extra) fprintf(stderr, "cuda_emu: cuLaunchKernel `extra` is not supported\n");
    // A kernel without parameters may legitimately pass no kernelParams.
  }
  if (trace())
    fprintf(stderr, "cuda_emu: launch %s grid (%u,%u,%u) block (%u,%u,%u) smem %u\n", f->name.c_str(), gx, gy, gz,
            bx, by, bz, smem);
  std::lock_guard<std::mutex> g(g_launch_mutex);
  ensure_stacks();
  const unsigned n = unsigned(threads);
  g_fibers.assign(n, Fiber{});
  for (unsigned z = 0, i = 0; z < bz; ++z)
    for (unsigned y = 0; y < by; ++y)
      for (unsigned x = 0; x < bx; ++x, ++i) {
        g_fibers[i].tid = dim3(x, y, z);
        g_fibers[i].linear = i;
      }
  g_warp_buf.assign(((n + 31) / 32) * 32, 0);
  g_wide_buf.assign(((n + 31) / 32) * 2 * 32 * kWideWords, 0);
  if (smem > g_smem_alloc) {
    free(g_smem);
    g_smem_alloc = (smem + kSmemAlign - 1) / kSmemAlign * kSmemAlign;
    g_smem = static_cast<unsigned char*>(aligned_alloc(kSmemAlign, g_smem_alloc));
  }
  g_smem_cap = smem;
  // setmaxnreg's pool: a kernel that uses it declares __launch_bounds__(threads, 1), and
  // ptxas then gives each thread 65536 / threads registers (at most 255), rounded down to 8.
  g_launch_regs = std::min(255u, 65536u / n) / 8 * 8;
  g_tramp = f->kernel.tramp;
  g_params = params;
  g_kernel = f->name.c_str();
  blockDim = dim3(bx, by, bz);
  gridDim = dim3(gx, gy, gz);
  // The fault handler runs on its own 64 KB alternate stack while a kernel runs (the
  // fiber stack may be the thing that overflowed; Rust's 8 KB one is too small for it).
  static thread_local char* alt = static_cast<char*>(malloc(64 * 1024));
  stack_t ss{}, old_ss{};
  ss.ss_sp = alt;
  ss.ss_size = 64 * 1024;
  sigaltstack(&ss, &old_ss);
  t_in_kernel = true;
  const FpDefaults fp;
  for (unsigned z = 0; z < gz; ++z)
    for (unsigned y = 0; y < gy; ++y)
      for (unsigned x = 0; x < gx; ++x) {
        blockIdx = dim3(x, y, z);
        run_block(n);
      }
  t_in_kernel = false;
  sigaltstack(&old_ss, nullptr);
  g_kernel = nullptr;
  return CUDA_SUCCESS;
}

const char* error_name(CUresult e) {
  switch (e) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case 222: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 301: return "CUDA_ERROR_FILE_NOT_FOUND";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 401: return "CUDA_ERROR_ILLEGAL_STATE";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 900: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case 901: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case 912: return "CUDA_ERROR_INVALID_CLUSTER_SIZE";
    default: return nullptr;
  }
}
const char* error_string(CUresult e) {
  switch (e) {
    case 0: return "no error";
    case 1: return "invalid argument";
    case 2: return "out of memory";
    case 3: return "initialization error";
    case 101: return "invalid device ordinal";
    case 200: return "device kernel image is invalid (the CPU emulator reads fatbins and PTX text)";
    case 209: return "no kernel image is available for execution on the device";
    case 222: return "the provided PTX was compiled with an unsupported toolchain";
    case 201: return "invalid device context";
    case 301: return "file not found";
    case 400: return "invalid resource handle";
    case 401: return "the operation is not permitted in the current state";
    case 900: return "operation not permitted when stream is capturing";
    case 901: return "operation failed due to a previous error during capture";
    case 912: return "invalid cluster size";
    case 500: return "named symbol not found";
    case 600: return "device not ready";
    case 701: return "too many resources requested for launch";
    case 719: return "unspecified launch failure";
    case 801: return "operation not supported (by the CPU emulator)";
    default: return nullptr;
  }
}

}  // namespace

// ============================================================ driver API
#define API extern "C" __attribute__((visibility("default")))

API CUresult cuInit(unsigned) { return CUDA_SUCCESS; }
API CUresult cuDriverGetVersion(int* v) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = fatbin::driver_version();
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetCount(int* c) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  *c = 1;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  snprintf(name, size_t(len), "%s", "hopscore CPU emulator");
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetAttribute(int* pi, int attrib, CUdevice d) {
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  int v = 0;
  switch (attrib) {
    case 1: v = 1024; break;           // MAX_THREADS_PER_BLOCK
    case 2: case 3: v = 1024; break;   // MAX_BLOCK_DIM_X/Y
    case 4: v = 64; break;             // MAX_BLOCK_DIM_Z
    case 5: v = 2147483647; break;     // MAX_GRID_DIM_X
    case 6: case 7: v = 65535; break;  // MAX_GRID_DIM_Y/Z
    case 8: v = int(kDefaultSmem); break;  // MAX_SHARED_MEMORY_PER_BLOCK
    case 9: v = 65536; break;          // TOTAL_CONSTANT_MEMORY
    case 10: v = 32; break;            // WARP_SIZE
    case 12: v = 65536; break;         // MAX_REGISTERS_PER_BLOCK
    case 13: v = 1000000; break;       // CLOCK_RATE (kHz)
    case 16: v = kMultiprocessors; break;  // MULTIPROCESSOR_COUNT
    case 38: v = 50 << 20; break;      // L2_CACHE_SIZE
    case 39: v = 2048; break;          // MAX_THREADS_PER_MULTIPROCESSOR
    case 41: v = 1; break;             // UNIFIED_ADDRESSING
    case 75: v = fatbin::device_cc() / 10; break;  // COMPUTE_CAPABILITY_MAJOR
    case 76: v = fatbin::device_cc() % 10; break;  // COMPUTE_CAPABILITY_MINOR
    case 81: v = 228 * 1024; break;    // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
    case 82: v = 65536; break;         // MAX_REGISTERS_PER_MULTIPROCESSOR
    case 97: v = int(kOptinSmem); break;  // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    case 106: v = 32; break;           // MAX_BLOCKS_PER_MULTIPROCESSOR
    case 115: v = 1; break;            // MEMORY_POOLS_SUPPORTED
    default: v = 0; break;
  }
  *pi = v;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  *bytes = kTotalMem;
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetUuid(void* uuid, CUdevice) {
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  memcpy(uuid, "hopscore-cpu-emu", 16);
  return CUDA_SUCCESS;
}
API CUresult cuDeviceGetUuid_v2(void* uuid, CUdevice d) { return cuDeviceGetUuid(uuid, d); }

API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> g(g_mutex);
  ++g_primary_refs;
  *ctx = &g_primary_ctx;
  return CUDA_SUCCESS;
}
API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  if (d != 0) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> g(g_mutex);
  if (g_primary_refs > 0) --g_primary_refs;
  return CUDA_SUCCESS;
}
API CUresult cuCtxSetCurrent(CUcontext ctx) {
  t_ctx = ctx;
  return CUDA_SUCCESS;
}
API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = t_ctx;
  return CUDA_SUCCESS;
}
API CUresult cuCtxGetDevice(CUdevice* d) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  *d = 0;
  return CUDA_SUCCESS;
}
API CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }
API CUresult cuCtxSetFlags(unsigned) { return CUDA_SUCCESS; }
API CUresult cuCtxGetLimit(size_t* v, int) {
  if (!v) return CUDA_ERROR_INVALID_VALUE;
  *v = 0;
  return CUDA_SUCCESS;
}
API CUresult cuCtxSetLimit(int, size_t) { return CUDA_SUCCESS; }
API CUresult cuCtxGetCacheConfig(int* c) {
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  *c = 0;
  return CUDA_SUCCESS;
}
API CUresult cuCtxSetCacheConfig(int) { return CUDA_SUCCESS; }
API CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return CUDA_SUCCESS;
}

API CUresult cuStreamCreate(CUstream* s, unsigned) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  *s = new Stream;
  return CUDA_SUCCESS;
}
API CUresult cuStreamCreateWithPriority(CUstream* s, unsigned flags, int) { return cuStreamCreate(s, flags); }
API CUresult cuStreamDestroy_v2(CUstream s) {
  if (s && s != reinterpret_cast<CUstream>(0x1) && s != reinterpret_cast<CUstream>(0x2)) delete static_cast<Stream*>(s);
  return CUDA_SUCCESS;
}
API CUresult cuStreamSynchronize(CUstream s) {
  if (Stream* st = capturing(s)) return refuse(st, "cuStreamSynchronize");
  return CUDA_SUCCESS;
}
API CUresult cuStreamQuery(CUstream) { return CUDA_SUCCESS; }
API CUresult cuStreamWaitEvent(CUstream, CUevent, unsigned) { return CUDA_SUCCESS; }
API CUresult cuStreamIsCapturing(CUstream s, int* status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  const Stream* st = capturing(s);
  *status = !st ? 0 : (st->invalidated ? 2 : 1);  // NONE, ACTIVE, INVALIDATED
  return CUDA_SUCCESS;
}
API CUresult cuStreamBeginCapture_v2(CUstream s, int /*mode*/) {
  if (!is_created(s)) {
    fprintf(stderr, "cuda_emu: cuStreamBeginCapture on the legacy or per-thread stream\n");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto* st = static_cast<Stream*>(s);
  if (st->capture) return CUDA_ERROR_ILLEGAL_STATE;
  st->capture = new Graph;
  st->invalidated = false;
  return CUDA_SUCCESS;
}
API CUresult cuStreamEndCapture(CUstream s, CUgraph* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = capturing(s);
  if (!st) return CUDA_ERROR_ILLEGAL_STATE;
  Graph* g = st->capture;
  st->capture = nullptr;
  if (st->invalidated) {
    delete g;
    *out = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *out = g;
  return CUDA_SUCCESS;
}
API CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph g, unsigned long long /*flags*/) {
  if (!out || !g) return CUDA_ERROR_INVALID_VALUE;
  *out = new Graph(*static_cast<Graph*>(g));
  return CUDA_SUCCESS;
}
API CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  if (Stream* st = capturing(s)) return refuse(st, "cuGraphLaunch (a graph in a graph)");
  for (auto& node : static_cast<Graph*>(e)->nodes)
    if (CUresult r = node()) return r;
  return CUDA_SUCCESS;
}
API CUresult cuGraphUpload(CUgraphExec e, CUstream) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
API CUresult cuGraphExecDestroy(CUgraphExec e) {
  delete static_cast<Graph*>(e);
  return CUDA_SUCCESS;
}
API CUresult cuGraphDestroy(CUgraph g) {
  delete static_cast<Graph*>(g);
  return CUDA_SUCCESS;
}
// For the fake cuBLASLt: records `run(ctx)` (a failure is a launch failure at replay;
// `drop(ctx)` when the last graph holding it is destroyed) into the graph `s` is
// capturing and returns 1, or returns 0 when `s` is not capturing.
API int hopscore_emu_capture(CUstream s, int (*run)(void*), void* ctx, void (*drop)(void*)) {
  Stream* st = capturing(s);
  if (!st) return 0;
  std::shared_ptr<void> held(ctx, drop);
  st->capture->nodes.push_back([run, held] { return run(held.get()) ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS; });
  return 1;
}

API CUresult cuEventCreate(CUevent* e, unsigned flags) {
  if (!e) return CUDA_ERROR_INVALID_VALUE;
  auto* ev = new Event;
  ev->timing = (flags & CU_EVENT_DISABLE_TIMING) == 0;
  *e = ev;
  return CUDA_SUCCESS;
}
API CUresult cuEventRecord(CUevent e, CUstream s) {
  if (!e) return CUDA_ERROR_INVALID_HANDLE;
  auto* ev = static_cast<Event*>(e);
  return run_or_record(s, [ev] {
    ev->t = std::chrono::steady_clock::now();
    ev->recorded = true;
    return CUDA_SUCCESS;
  });
}
API CUresult cuEventSynchronize(CUevent e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
API CUresult cuEventQuery(CUevent e) { return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
API CUresult cuEventDestroy_v2(CUevent e) {
  delete static_cast<Event*>(e);
  return CUDA_SUCCESS;
}
API CUresult cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  if (!ms || !a || !b) return CUDA_ERROR_INVALID_VALUE;
  auto *ea = static_cast<Event*>(a), *eb = static_cast<Event*>(b);
  // The driver API: "If either event was created with the CU_EVENT_DISABLE_TIMING flag,
  // then this function will return CUDA_ERROR_INVALID_HANDLE."
  if (!ea->timing || !eb->timing) return CUDA_ERROR_INVALID_HANDLE;
  if (!ea->recorded || !eb->recorded) return CUDA_ERROR_NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(eb->t - ea->t).count();
  return CUDA_SUCCESS;
}
API CUresult cuEventElapsedTime_v2(float* ms, CUevent a, CUevent b) { return cuEventElapsedTime(ms, a, b); }

API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) { return alloc(p, n); }
API CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n, CUstream s) {
  // A GPU records an allocation node; the emulator does not model them.
  if (Stream* st = capturing(s)) return refuse(st, "cuMemAllocAsync (not modelled: allocate before capturing)");
  return alloc(p, n);
}
API CUresult cuMemFree_v2(CUdeviceptr p) { return release(p); }
API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  if (Stream* st = capturing(s)) return refuse(st, "cuMemFreeAsync (not modelled)");
  return release(p);
}
API CUresult cuMemGetInfo_v2(size_t* free_, size_t* total) {
  std::lock_guard<std::mutex> g(g_mutex);
  if (free_) *free_ = kTotalMem - std::min(g_allocated, kTotalMem);
  if (total) *total = kTotalMem;
  return CUDA_SUCCESS;
}
API CUresult cuMemAllocHost_v2(void** pp, size_t n) {
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  *pp = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
  if (!*pp) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard<std::mutex> g(g_mutex);
  g_pinned[uintptr_t(*pp)] = n;
  return CUDA_SUCCESS;
}
API CUresult cuMemHostAlloc(void** pp, size_t n, unsigned) { return cuMemAllocHost_v2(pp, n); }
API CUresult cuMemFreeHost(void* p) {
  {
    std::lock_guard<std::mutex> g(g_mutex);
    g_pinned.erase(uintptr_t(p));
  }
  free(p);
  return CUDA_SUCCESS;
}

static CUresult copy(void* dst, const void* src, size_t n) {
  if (n && (!dst || !src)) return CUDA_ERROR_INVALID_VALUE;
  if (n) memmove(dst, src, n);
  return CUDA_SUCCESS;
}
#define DPTR(p) reinterpret_cast<void*>(uintptr_t(p))
API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void* h, size_t n) { return copy(DPTR(d), h, n); }
// Copies between the host and a capturing stream are graph nodes only from page-locked
// memory (the node reads or writes it at each replay); pageable memory fails, as on a GPU.
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void* h, size_t n, CUstream s) {
  if (Stream* st = capturing(s); st && !is_pinned(h, n)) return refuse(st, "cuMemcpyHtoDAsync from pageable memory");
  return run_or_record(s, [=] { return copy(DPTR(d), h, n); });
}
API CUresult cuMemcpyDtoH_v2(void* h, CUdeviceptr d, size_t n) { return copy(h, DPTR(d), n); }
API CUresult cuMemcpyDtoHAsync_v2(void* h, CUdeviceptr d, size_t n, CUstream s) {
  if (Stream* st = capturing(s); st && !is_pinned(h, n)) return refuse(st, "cuMemcpyDtoHAsync to pageable memory");
  return run_or_record(s, [=] { return copy(h, DPTR(d), n); });
}
API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy(DPTR(d), DPTR(s), n); }
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) {
  return run_or_record(st, [=] { return copy(DPTR(d), DPTR(s), n); });
}
API CUresult cuMemcpyPeerAsync(CUdeviceptr d, CUcontext, CUdeviceptr s, CUcontext, size_t n, CUstream) {
  return copy(DPTR(d), DPTR(s), n);
}
API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  if (n && !d) return CUDA_ERROR_INVALID_VALUE;
  if (n) memset(DPTR(d), v, n);
  return CUDA_SUCCESS;
}
API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  return run_or_record(s, [=] { return cuMemsetD8_v2(d, v, n); });
}
API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
  if (n && !d) return CUDA_ERROR_INVALID_VALUE;
  auto* p = static_cast<unsigned short*>(DPTR(d));
  for (size_t i = 0; i < n; ++i) p[i] = v;
  return CUDA_SUCCESS;
}
API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  return run_or_record(s, [=] { return cuMemsetD16_v2(d, v, n); });
}
API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) {
  if (n && !d) return CUDA_ERROR_INVALID_VALUE;
  auto* p = static_cast<unsigned*>(DPTR(d));
  for (size_t i = 0; i < n; ++i) p[i] = v;
  return CUDA_SUCCESS;
}
API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s) {
  return run_or_record(s, [=] { return cuMemsetD32_v2(d, v, n); });
}

API CUresult cuModuleLoadData(CUmodule* m, const void* image) { return load_module(m, static_cast<const char*>(image)); }
API CUresult cuModuleLoadDataEx(CUmodule* m, const void* image, unsigned, void*, void**) {
  return load_module(m, static_cast<const char*>(image));
}
API CUresult cuModuleLoad(CUmodule* m, const char* path) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream in(path, std::ios::binary);
  if (!in) return CUDA_ERROR_FILE_NOT_FOUND;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  return load_module(m, s.c_str());
}
API CUresult cuModuleUnload(CUmodule m) {
  auto* mod = static_cast<Module*>(m);
  if (!mod) return CUDA_ERROR_INVALID_HANDLE;
  for (auto& kv : mod->functions) delete kv.second;
  delete mod;
  return CUDA_SUCCESS;
}
API CUresult cuModuleGetFunction(CUfunction* out, CUmodule m, const char* name) {
  auto* mod = static_cast<Module*>(m);
  if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
  if (!mod) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(g_mutex);
  auto it = mod->functions.find(name);
  if (it != mod->functions.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  if (!mod->entries.count(name)) return CUDA_ERROR_NOT_FOUND;
  auto r = registry().find(name);
  if (r == registry().end()) {
    fprintf(stderr,
            "cuda_emu: kernel `%s` is in the module but not in the emulator: is it followed by "
            "HOPSCORE_ENTRY(%s); and was tools/cuda_emu/build.sh re-run?\n",
            name, name);
    return CUDA_ERROR_NOT_FOUND;
  }
  auto* f = new Function{name, r->second};
  mod->functions[name] = f;
  *out = f;
  return CUDA_SUCCESS;
}
API CUresult cuModuleGetGlobal_v2(CUdeviceptr*, size_t*, CUmodule, const char* name) {
  fprintf(stderr, "cuda_emu: cuModuleGetGlobal(%s) is not supported\n", name ? name : "?");
  return CUDA_ERROR_NOT_FOUND;
}

API CUresult cuFuncSetAttribute(CUfunction fh, int attrib, int value) {
  auto* f = static_cast<Function*>(fh);
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (attrib == 8) {  // MAX_DYNAMIC_SHARED_SIZE_BYTES
    if (value < 0 || size_t(value) > kOptinSmem) return CUDA_ERROR_INVALID_VALUE;
    f->max_dynamic_smem = value;
  }
  return CUDA_SUCCESS;
}
API CUresult cuFuncGetAttribute(int* pi, int attrib, CUfunction fh) {
  auto* f = static_cast<Function*>(fh);
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  switch (attrib) {
    case 0: *pi = 1024; break;  // MAX_THREADS_PER_BLOCK
    case 4: *pi = 32; break;    // NUM_REGS
    case 5: *pi = 80; break;    // PTX_VERSION
    case 6: *pi = 90; break;    // BINARY_VERSION
    case 8: *pi = f->max_dynamic_smem; break;
    default: *pi = 0; break;
  }
  return CUDA_SUCCESS;
}
API CUresult cuFuncSetCacheConfig(CUfunction, int) { return CUDA_SUCCESS; }

// The checks of the driver's documentation of cuTensorMapEncodeTiled (tile mode, no
// interleave modelled), then the emulator's image of the map (TensorMapImage).
API CUresult cuTensorMapEncodeTiled(void* map, int dtype, unsigned rank, void* global, const uint64_t* dims,
                                    const uint64_t* strides, const unsigned* box, const unsigned* element_strides,
                                    int interleave, int swizzle, int l2_promotion, int oob_fill) {
  static constexpr uint8_t kBytes[13] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};  // CUtensorMapDataType 0..12
  auto bad = [](const char* why) {
    fprintf(stderr, "cuda_emu: cuTensorMapEncodeTiled: %s\n", why);
    return CUDA_ERROR_INVALID_VALUE;
  };
  if (!map || reinterpret_cast<uintptr_t>(map) & 63u) return bad("the map is not 64-byte aligned");
  if (dtype < 0 || dtype > 12) return bad("unknown data type");
  if (rank < 1 || rank > 5) return bad("rank outside [1, 5]");
  if (!global || reinterpret_cast<uintptr_t>(global) & 15u) return bad("global address not 16-byte aligned");
  if (interleave != 0) return bad("interleaved layouts are not modelled");
  if (swizzle < 0 || swizzle > 3) return bad("swizzle other than none, 32, 64 or 128 bytes (not modelled)");
  (void)l2_promotion;
  TensorMapImage t{};
  t.magic = kTensorMapMagic;
  t.global = static_cast<const unsigned char*>(global);
  t.rank = uint8_t(rank);
  t.elem_bytes = kBytes[dtype];
  t.swizzle = uint16_t(swizzle ? 16u << swizzle : 0u);
  t.oob_nan = oob_fill == 1;
  for (unsigned d = 0; d < rank; ++d) {
    if (dims[d] == 0 || dims[d] > (1ull << 32)) return bad("a global dimension outside [1, 2^32]");
    if (box[d] == 0 || box[d] > 256) return bad("a box dimension outside [1, 256]");
    if (element_strides[d] != 1) return bad("element strides other than 1 are not modelled");
    t.dims[d] = dims[d];
    t.box[d] = uint16_t(box[d]);
    if (d > 0) {
      if (strides[d - 1] % 16 || strides[d - 1] >= (1ull << 40)) return bad("a global stride not a multiple of 16 below 2^40");
      t.strides[d - 1] = strides[d - 1];
    }
  }
  if (box[0] * t.elem_bytes % 16) return bad("the inner box dimension is not a multiple of 16 bytes");
  if (t.swizzle && box[0] * t.elem_bytes > t.swizzle) return bad("the inner box dimension exceeds the swizzle span");
  memset(map, 0, 128);
  memcpy(map, &t, sizeof t);
  return CUDA_SUCCESS;
}

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned smem, CUstream s, void** params, void** extra) {
  Stream* st = capturing(s);
  if (!st) return launch(f, gx, gy, gz, bx, by, bz, smem, params, extra);
  auto* fn = static_cast<Function*>(f);
  if (!fn) return CUDA_ERROR_INVALID_HANDLE;
  if (extra || (!params && !fn->kernel.sizes.empty())) return refuse(st, "cuLaunchKernel without kernelParams");
  // As CUDA: the argument values are copied when the launch is recorded.
  auto values = std::make_shared<std::vector<std::vector<char>>>();
  for (size_t i = 0; i < fn->kernel.sizes.size(); ++i) {
    const char* p = static_cast<const char*>(params[i]);
    values->emplace_back(p, p + fn->kernel.sizes[i]);
  }
  st->capture->nodes.push_back([=] {
    std::vector<void*> args;
    for (auto& v : *values) args.push_back(v.data());
    return launch(f, gx, gy, gz, bx, by, bz, smem, args.data(), nullptr);
  });
  return CUDA_SUCCESS;
}
// A cluster launch (the only attribute taken) runs as a plain one once the attribute
// passes the driver's checks: the kernels launched in clusters are CUTLASS's, whose
// stand-ins (cutlass.cpp) do not read the cluster.
API CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  if (!c || (c->numAttrs && !c->attrs)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    const CUlaunchAttribute& a = c->attrs[i];
    if (a.id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      fprintf(stderr, "cuda_emu: cuLaunchKernelEx attribute %d is not supported\n", int(a.id));
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    const auto& d = a.value.clusterDim;
    // 8: the portable cluster size (nothing here asks for more).
    if (!d.x || !d.y || !d.z || d.x * d.y * d.z > 8 || c->gridDimX % d.x || c->gridDimY % d.y ||
        c->gridDimZ % d.z)
      return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  return cuLaunchKernel(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                        c->sharedMemBytes, c->hStream, params, extra);
}
// One cluster per multiprocessor's worth of CTAs, and at least one (the emulator's
// device is small; a cluster runs one CTA after another here).
API CUresult cuOccupancyMaxActiveClusters(int* n, CUfunction f, const CUlaunchConfig* c) {
  if (!n || !f || !c || c->numAttrs != 1 || !c->attrs || c->attrs[0].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
    return CUDA_ERROR_INVALID_VALUE;
  const auto& d = c->attrs[0].value.clusterDim;
  const unsigned size = d.x * d.y * d.z;
  if (!size || size > 8) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  *n = fault_of(static_cast<Function*>(f)->name) == Fault::NoCluster ? 0 : std::max(1, kMultiprocessors / int(size));
  return CUDA_SUCCESS;
}
API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                       unsigned bz, unsigned smem, CUstream, void** params) {
  return launch(f, gx, gy, gz, bx, by, bz, smem, params, nullptr);
}
API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void* user) {
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  return run_or_record(s, [=] {
    fn(user);
    return CUDA_SUCCESS;
  });
}

API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, CUfunction f, int block, size_t) {
  if (!n || !f || block <= 0) return CUDA_ERROR_INVALID_VALUE;
  *n = std::max(1, std::min(32, 2048 / block));
  return CUDA_SUCCESS;
}
API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, CUfunction f, int block, size_t s, unsigned) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessor(n, f, block, s);
}
API CUresult cuOccupancyMaxPotentialBlockSize(int* min_grid, int* block, CUfunction f, CUoccupancyB2DSize, size_t,
                                              int limit) {
  if (!min_grid || !block || !f) return CUDA_ERROR_INVALID_VALUE;
  *block = limit > 0 ? std::min(limit, 1024) : 1024;
  *min_grid = 2 * std::max(1, 2048 / *block);
  return CUDA_SUCCESS;
}
API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* min_grid, int* block, CUfunction f, CUoccupancyB2DSize b2d,
                                                       size_t s, int limit, unsigned) {
  return cuOccupancyMaxPotentialBlockSize(min_grid, block, f, b2d, s, limit);
}
API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* s, CUfunction f, int, int) {
  if (!s || !f) return CUDA_ERROR_INVALID_VALUE;
  *s = kOptinSmem;
  return CUDA_SUCCESS;
}

API CUresult cuProfilerStart() { return CUDA_SUCCESS; }
API CUresult cuProfilerStop() { return CUDA_SUCCESS; }

API CUresult cuGetErrorName(CUresult e, const char** s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  *s = error_name(e);
  return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
API CUresult cuGetErrorString(CUresult e, const char** s) {
  if (!s) return CUDA_ERROR_INVALID_VALUE;
  *s = error_string(e);
  return *s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
