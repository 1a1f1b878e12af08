#pragma once
// A host emulation of the CUDA operations the quantised and bf16 grouped GEMM kernels and the flash
// attention kernels use (the lists are in src/backend/cuda/quant/weight_only_kernel.cuh,
// moe/grouped_kernel.cuh, quant/w8a8_experts_kernel.cuh (FP8 wgmma), attention/flash_mma_kernel.cuh and
// attention/flash_wgmma_kernel.cuh), so that the kernels themselves run in the
// unit tests of a machine without a GPU: a block is 128 (up to 384) fibers with a barrier for
// __syncthreads and for the warp-collective ldmatrix / mma.sync / shuffles, shared memory a buffer whose
// every access is bounds- and alignment-checked, cp.async a copy performed when its thread waits for
// its group (its global source checked against the buffers a test declares), wgmma likewise (so a
// kernel that reads a copy before waiting for it, or refills an MMA's operands before every issuing
// thread has waited for it, computes with the wrong data). The fragment layouts are the PTX ISA's
// (ldmatrix: lane i gets word i % 4 of row i / 4 of each matrix, whose row addresses come from lanes
// 8 j .. 8 j + 7; m16n8k16: A row g = lane / 4 (+8), k = 2 (lane % 4) (+8); B k likewise, n = lane / 4;
// C rows g (+8), cols 2 (lane % 4) (+1)). The device path is checked by tests/gpu; this checks the
// kernel's indexing, device layout and decoding wherever the unit tests run. Not a general emulator:
// no other asynchrony, no memory model, a warp's lanes only meet at the collectives and __syncwarp.
// Also blockDim / gridDim, uint4, __ldg and the fp64 shuffle of the row kernels (layer/residual_kernel.cuh,
// moe/combine_kernel.cuh, quant/fp8_quant_kernel.cuh, layer/qkv_prologue_kernel.cuh with its cos_f32 /
// sin_f32), and what the routing kernels use
// (moe/route_kernel.cuh): static shared arrays, the integer shuffles and reductions, atomics and
// fences (plain: one block runs at a time), __ldcg / __stcg, exp_f32 and warp_reduce. And the
// transaction barriers and TMA copies of the warp-specialised GEMM (moe/grouped_tma_kernel.cuh,
// core/tma_ptx.cuh): a barrier counts arrivals and bytes per phase, a waiting thread yields until its phase
// completes, and the data of the copies that report to a barrier (TMA loads, cp.async with an
// arrive) lands only when the barrier's phase completes, so a stage read before its wait, or refilled
// before its readers released it, computes with the wrong data here. Named barriers (bar.sync with a
// thread count). The wgmma forms: bf16 m64 n32 / n80 / n128 k16 from shared memory (K-major),
// m64n256k16 with A from registers and B MN-major (the transposed form), FP8 m64n128k32; a write
// issued into the shared-memory operands of a wgmma that some thread has issued and not yet waited
// for is reported at once (a race on the GPU whatever the order the emulation runs the threads in).
// Threads run round robin, or (g_jitter_seed) with warps sitting out random runs of rounds, so that
// producers and consumers drift apart as on the GPU.
// And __syncthreads_and (sampler/decide_kernel.cuh). And what the sampler's kernels use
// (sampler/sampler_kernel.cuh, blocks of 512 threads): uint2, the int
// shuffle and votes, shared-memory atomicMax / atomicMin, block_reduce, __fmaf_rn, and the fast
// logarithm __log2f, which returns the exact value moved by the largest error the CUDA
// programming guide allows them, in a direction that depends on the argument: a kernel whose error
// argument leaves too little margin for them fails here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <functional>
#include <map>
#include <utility>
#include <memory>
#include <ucontext.h>
#include <utility>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define DG_KERNEL_DYNAMIC_SMEM(name) unsigned char* name = emu::smem()
// Static shared arrays: one object for every thread of the block (blocks run one at a time).
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
typedef void* cudaStream_t;
struct Dim3 { unsigned x = 0, y = 0, z = 0; };
namespace emu {
inline thread_local Dim3 t_thread, t_block, t_block_dim, t_grid_dim;
inline unsigned char* g_smem = nullptr;
inline uint32_t g_smem_bytes = 0;
inline void chk(uint32_t a, uint32_t n, uint32_t align) {
  if (a + n > g_smem_bytes || a % align) {
    std::fprintf(stderr, "emulated kernel: shared access at %u (+%u, alignment %u) outside %u bytes\n", a, n, align, g_smem_bytes);
    std::abort();
  }
}
// Global buffers a test declares (none declared: unchecked); every valid cp.async source must lie in one.
inline std::vector<std::pair<const unsigned char*, size_t>> g_global;
inline void chk_global(const void* p, size_t n) {
  if (g_global.empty()) return;
  const auto* b = static_cast<const unsigned char*>(p);
  for (const auto& [base, size] : g_global)
    if (b >= base && b + n <= base + size) return;
  std::fprintf(stderr, "emulated kernel: global read at %p (+%zu) outside every declared buffer\n", p, n);
  std::abort();
}
// The threads of a block are fibers (ucontext) of the calling thread, switched only at barriers: a
// barrier phase costs a few context switches per thread instead of waking OS threads, and a barrier
// that some thread never reaches is reported (abort) instead of hanging.
struct Fiber {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;  // not value-initialised: 512 fibers' stacks are not written up front
  size_t stack_bytes = 0;
  bool done = false;
};
inline ucontext_t g_sched_ctx;
inline std::vector<Fiber>* g_fibers = nullptr;
inline int g_cur = -1;
inline uint64_t g_progress = 0;  // barrier phases completed and threads finished
inline void yield_fiber() { swapcontext(&(*g_fibers)[static_cast<size_t>(g_cur)].ctx, &g_sched_ctx); }
// 0: plain round robin. Otherwise the seed of a schedule in which each warp, at the start of a round,
// falls asleep with probability 1/16 for 1 .. 64 rounds: a warp then lags the others by many barrier
// phases, as a descheduled warp can on the GPU, so a producer runs ahead of a consumer that has
// released a stage but not yet read it (wgmma operands are read at the wait) and a refill that comes
// too early lands first.
inline uint64_t g_jitter_seed = 0;
inline uint64_t jitter_next(uint64_t& state) {  // splitmix64
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
class Barrier {
 public:
  explicit Barrier(int expected) : expected_(expected) {}
  void arrive_and_wait() {
    const uint64_t my = phase_;
    if (++arrived_ >= expected_) {
      complete();
      return;
    }
    while (phase_ == my) yield_fiber();
  }
  void arrive_and_drop() {  // counts for this phase, leaves the later ones
    --expected_;
    if (arrived_ > 0 && arrived_ >= expected_) complete();
  }

 private:
  void complete() {
    arrived_ = 0;
    ++phase_;
    ++g_progress;
  }
  int expected_, arrived_ = 0;
  uint64_t phase_ = 0;
};
inline Barrier* g_block_bar = nullptr;
constexpr int kMaxWarps = 32;
inline Barrier* g_warp_bar[kMaxWarps];
inline uint32_t g_scratch[kMaxWarps][32][8];  // per-warp exchange of collectives that wait twice
// The double-buffered exchange of ldmatrix / mma (collective_scratch below): one barrier a call.
inline uint32_t g_xchg[2][kMaxWarps][32][8];
inline uint8_t g_parity[kMaxWarps][32];
// Named barriers (bar.sync id, threads) of the running block, made at their first use.
inline std::map<int, std::unique_ptr<Barrier>> g_named_bars;
inline unsigned char* smem() { return g_smem; }
// The asynchronous copies and warpgroup MMAs of each thread, performed only when the thread waits for
// them (cp_async_wait / wgmma_wait): the latest moment the hardware may do them. So a kernel that reads
// a copy's destination before waiting for it, or overwrites an MMA's operands (from any thread) before
// every thread that issued it has waited for it, computes with the wrong data here.
struct AsyncCopy {
  uint32_t dst;
  unsigned char bytes[16];
};
struct AsyncMma {
  float* d = nullptr;
  uint64_t da = 0, db = 0;
  bool fp8 = false;        // wgmma_m64n128k32_e4m3 (else a bf16 form)
  bool accumulate = true;  // scale-d: false, d = A . B
  int n = 128;             // the bf16 forms' N
  bool b_mn = false;       // B MN-major (the transposed form) instead of K-major
  bool a_regs = false;     // A from registers: a_vals, this thread's two rows, gathered at the issue
  float a_vals[2][16] = {};
  std::vector<uint32_t> units;  // the 16-byte units of shared memory its operands occupy (g_mma_reads)
};
struct ThreadAsync {
  std::vector<AsyncCopy> copies;               // issued, not yet committed
  std::vector<std::vector<AsyncCopy>> groups;  // committed, oldest first
  std::vector<AsyncMma> mmas;
  std::vector<std::vector<AsyncMma>> mma_groups;
};
inline std::vector<ThreadAsync> g_async;
// A transaction barrier (core/tma_ptx.cuh) at a shared-memory address: the current phase's arrivals and
// bytes still owed, the phases completed, and the writes that land when the current one completes.
struct Mbar {
  int expected = 0, pending = 0;
  int64_t tx = 0;
  uint64_t completed = 0;
  std::vector<std::pair<uint32_t, std::vector<unsigned char>>> writes;
};
inline std::map<uint32_t, Mbar> g_mbars;
// Per 16-byte unit of shared memory: the issued wgmma that read it and have not been performed yet
// (each issuing thread counts). Shared memory written while an MMA that reads it is in flight (a copy
// or store issued into a stage before every thread of the MMA has waited for it) is a race on the
// GPU whatever the order the emulation runs the threads in: reported at the write's issue.
inline std::vector<uint32_t> g_mma_reads;
inline void chk_no_mma_read(uint32_t a, uint32_t n) {
  for (uint32_t u = a / 16; u <= (a + n - 1) / 16 && u < g_mma_reads.size(); ++u)
    if (g_mma_reads[u] != 0) {
      std::fprintf(stderr, "emulated kernel: shared memory at %u written while a wgmma reading it is in flight\n", 16 * u);
      std::abort();
    }
}
inline ThreadAsync& async_state() { return g_async[static_cast<size_t>(g_cur)]; }
inline std::function<void()>* g_fn = nullptr;
inline void fiber_main() {
  (*g_fn)();
  // an exiting thread must not leave others waiting at a barrier: drop it from future phases
  g_block_bar->arrive_and_drop();
  g_warp_bar[g_cur / 32]->arrive_and_drop();
  (*g_fibers)[static_cast<size_t>(g_cur)].done = true;
  ++g_progress;
}  // returns to g_sched_ctx (uc_link)
// The context calls out of line: getcontext / swapcontext return twice, which must not touch the
// scheduler's locals.
[[gnu::noinline]] inline void start_fiber(Fiber& f) {
  f.done = false;
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack.get();
  f.ctx.uc_stack.ss_size = f.stack_bytes;
  f.ctx.uc_link = &g_sched_ctx;
  makecontext(&f.ctx, fiber_main, 0);
}
[[gnu::noinline]] inline void resume_fiber(Fiber& f) { swapcontext(&g_sched_ctx, &f.ctx); }
// Runs fn as every thread of every block of a gx x gy x gz grid, blocks of `threads` (a multiple of 32,
// at most 32 kMaxWarps = 1024) threads, one block at a time.
inline void launch_3d(std::function<void()> fn, int gx, int gy, int gz, int smem_bytes, int threads = 128) {
  if (threads <= 0 || threads % 32 != 0 || threads > 32 * kMaxWarps) {
    std::fprintf(stderr, "emulated kernel: %d threads per block\n", threads);
    std::abort();
  }
  const int warps = threads / 32;
  std::vector<unsigned char> buf(static_cast<size_t>(smem_bytes) + 256, 0xCD);
  std::vector<Fiber> fibers(static_cast<size_t>(threads));
  for (auto& f : fibers) {
    f.stack_bytes = size_t{256} << 10;
    f.stack.reset(new char[f.stack_bytes]);
  }
  g_fibers = &fibers;
  g_fn = &fn;
  t_block_dim = Dim3{static_cast<unsigned>(threads), 1, 1};
  t_grid_dim = Dim3{static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz)};
  for (int bz = 0; bz < gz; ++bz)
    for (int by = 0; by < gy; ++by)
      for (int bx = 0; bx < gx; ++bx) {
        g_smem = buf.data();
        g_smem_bytes = static_cast<uint32_t>(smem_bytes);
        std::fill(buf.begin(), buf.end(), 0xCD);
        Barrier bb(threads);
        std::vector<std::unique_ptr<Barrier>> wb;
        for (int w = 0; w < warps; ++w) {
          wb.push_back(std::make_unique<Barrier>(32));
          g_warp_bar[w] = wb.back().get();
        }
        g_block_bar = &bb;
        g_named_bars.clear();
        std::memset(g_parity, 0, sizeof g_parity);
        t_block.x = static_cast<unsigned>(bx);
        t_block.y = static_cast<unsigned>(by);
        t_block.z = static_cast<unsigned>(bz);
        g_async.assign(static_cast<size_t>(threads), ThreadAsync{});
        g_mbars.clear();
        g_mma_reads.assign(buf.size() / 16 + 1, 0);
        for (auto& f : fibers) start_fiber(f);
        // Round robin until every thread has finished; a round in which nothing progressed while
        // threads remain (and no warp sat out) means they wait at barriers that the others will
        // never reach. With g_jitter_seed, warps sit out runs of rounds (below).
        std::vector<int> asleep(static_cast<size_t>(warps), 0);
        uint64_t rng = g_jitter_seed ^ (static_cast<uint64_t>(bx) << 40) ^ (static_cast<uint64_t>(by) << 20) ^ static_cast<uint64_t>(bz);
        for (;;) {
          const uint64_t before = g_progress;
          int live = 0;
          bool sat_out = false;
          if (g_jitter_seed != 0)
            for (int& zz : asleep) {
              if (zz > 0) --zz;
              if (zz == 0 && jitter_next(rng) % 16 == 0) zz = 1 + static_cast<int>(jitter_next(rng) % 64);
            }
          for (int t = 0; t < threads; ++t) {
            if (fibers[static_cast<size_t>(t)].done) continue;
            if (asleep[static_cast<size_t>(t / 32)] > 0) {
              sat_out = true;
              ++live;
              continue;
            }
            g_cur = t;
            t_thread.x = static_cast<unsigned>(t);
            resume_fiber(fibers[static_cast<size_t>(t)]);
            live += !fibers[static_cast<size_t>(t)].done;
          }
          if (live == 0) break;
          if (g_progress == before && !sat_out) {
            std::fprintf(stderr, "emulated kernel: block (%d, %d, %d) deadlocked at a barrier\n", bx, by, bz);
            std::abort();
          }
        }
      }
  g_fibers = nullptr;
  g_cur = -1;
}
inline void launch(std::function<void()> fn, int gx, int gy, int smem_bytes, int threads = 128) {
  launch_3d(std::move(fn), gx, gy, 1, smem_bytes, threads);
}
// A kernel whose threads never meet (no barrier, no collective, no shared memory: a table filled one
// entry a thread) without fibers: each thread of each block runs to its end in turn. No barrier is
// set: a barrier or a collective reached here crashes instead of computing.
inline void launch_independent(const std::function<void()>& fn, int gx, int gy, int threads) {
  t_block_dim = Dim3{static_cast<unsigned>(threads), 1, 1};
  t_grid_dim = Dim3{static_cast<unsigned>(gx), static_cast<unsigned>(gy), 1};
  g_block_bar = nullptr;
  for (int w = 0; w < kMaxWarps; ++w) g_warp_bar[w] = nullptr;
  for (int by = 0; by < gy; ++by)
    for (int bx = 0; bx < gx; ++bx)
      for (int t = 0; t < threads; ++t) {
        t_block = Dim3{static_cast<unsigned>(bx), static_cast<unsigned>(by), 0};
        t_thread = Dim3{static_cast<unsigned>(t), 0, 0};
        fn();
      }
}
}  // namespace emu
#define threadIdx emu::t_thread
#define blockIdx emu::t_block
#define blockDim emu::t_block_dim
#define gridDim emu::t_grid_dim
struct uint4 { uint32_t x, y, z, w; };
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return uint4{x, y, z, w}; }
struct uint2 { uint32_t x, y; };
inline uint2 make_uint2(uint32_t x, uint32_t y) { return uint2{x, y}; }
struct int4 { int x, y, z, w; };
inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsub_rn(float a, float b) { return a - b; }
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
// Blocks run one at a time, so a block's atomics and fences need no more than plain accesses.
inline unsigned atomicAdd(unsigned* p, unsigned v) { const unsigned old = *p; *p = old + v; return old; }
inline unsigned atomicExch(unsigned* p, unsigned v) { const unsigned old = *p; *p = v; return old; }
inline int atomicMax(int* p, int v) { const int old = *p; *p = std::max(old, v); return old; }
inline unsigned atomicMin(unsigned* p, unsigned v) { const unsigned old = *p; *p = std::min(old, v); return old; }
inline void __threadfence() {}
inline void __threadfence_block() {}
template <typename T>
inline T __ldcg(const T* p) { return *p; }
template <typename T>
inline void __stcg(T* p, T v) { *p = v; }
template <typename T>
inline T __ldg(const T* p) { return *p; }
inline void __syncthreads() { emu::g_block_bar->arrive_and_wait(); }
// The barrier with a vote: every thread publishes its predicate, meets the others, reads them all, and
// meets them again before anyone may vote anew.
namespace emu {
inline int g_vote[32 * kMaxWarps];
}
inline int __syncthreads_and(int pred) {
  emu::g_vote[threadIdx.x] = pred;
  emu::g_block_bar->arrive_and_wait();
  int all = 1;
  for (unsigned t = 0; t < blockDim.x; ++t) all = all && emu::g_vote[t] != 0;
  emu::g_block_bar->arrive_and_wait();
  return all;
}
inline void __syncwarp() { emu::g_warp_bar[threadIdx.x >> 5]->arrive_and_wait(); }  // the warp's lanes meet
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
// The fast logarithms at the edge of their documented accuracy: the exact value (in double) moved by
// the largest error allowed (absolute on [0.5, 2], ulps of the result elsewhere), up or down by a bit
// of the argument, then rounded to fp32.
inline float emu_fast_log(double exact, float x, double abs_err, double ulps) {
  const uint32_t u = __float_as_uint(x);
  const double sign = ((u ^ (u >> 7) ^ (u >> 13)) & 1) ? 1.0 : -1.0;
  if (!(x > 0.0f) || std::isinf(x)) return static_cast<float>(exact);  // -inf, NaN, +inf as the exact
  const double err = (x >= 0.5f && x <= 2.0f) ? abs_err : ulps * std::ldexp(1.0, std::ilogb(static_cast<float>(exact)) - 23);
  return static_cast<float>(exact + sign * err);
}
inline float __log2f(float x) { return emu_fast_log(std::log2(static_cast<double>(x)), x, std::exp2(-22.0), 2.0); }
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t in = x | (static_cast<uint64_t>(y) << 32);
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<uint32_t>((in >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
  return r;
}
using std::max;
using std::min;
using std::isnan;
namespace dgemma::cuda {
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline float bf16_to_f32(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }
inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }
inline float gelu_tanh(float x) {
  const float cube = x * x * x;
  const float inner = 0.7978845608028654f * (x + 0.044715f * cube);
  return 0.5f * x * (1.0f + static_cast<float>(std::tanh(static_cast<double>(inner))));
}
inline uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(static_cast<const unsigned char*>(p) - emu::g_smem); }
// Performed at the wait (emu::ThreadAsync); the global source is read at the issue (inputs do not change).
inline void cp_async16(uint32_t dst, const void* src, bool valid) {
  emu::chk(dst, 16, 16);
  emu::chk_no_mma_read(dst, 16);
  if (valid) emu::chk_global(src, 16);
  emu::AsyncCopy c{dst, {}};
  if (valid) std::memcpy(c.bytes, src, 16); else std::memset(c.bytes, 0, 16);
  emu::async_state().copies.push_back(c);
}
inline void cp_async16_hint(uint32_t dst, const void* src, bool valid, uint64_t) { cp_async16(dst, src, valid); }
inline uint64_t evict_first_policy() { return 0; }
inline void cp_async_commit() {
  emu::ThreadAsync& a = emu::async_state();
  a.groups.push_back(std::move(a.copies));
  a.copies.clear();
}
template <int N> inline void cp_async_wait() {
  emu::ThreadAsync& a = emu::async_state();
  while (a.groups.size() > static_cast<size_t>(N)) {
    for (const emu::AsyncCopy& c : a.groups.front()) std::memcpy(emu::g_smem + c.dst, c.bytes, 16);
    a.groups.erase(a.groups.begin());
  }
}
inline uint32_t lds_u32(uint32_t a) { emu::chk(a, 4, 4); uint32_t v; std::memcpy(&v, emu::g_smem + a, 4); return v; }
inline void lds_v2(uint32_t a, uint32_t (&v)[2]) { emu::chk(a, 8, 8); std::memcpy(v, emu::g_smem + a, 8); }
inline void lds_v4(uint32_t a, uint32_t (&v)[4]) { emu::chk(a, 16, 16); std::memcpy(v, emu::g_smem + a, 16); }
inline uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
  uint32_t r = 0;
  for (int h = 0; h < 2; ++h) {
    const float x = bf16_to_f32(static_cast<uint16_t>(a >> (16 * h))) * bf16_to_f32(static_cast<uint16_t>(b >> (16 * h))) + -0.0f;
    r |= static_cast<uint32_t>(f32_to_bf16(x)) << (16 * h);
  }
  return r;
}
// ldmatrix and mma exchange their operands through g_xchg[parity][warp]: a lane's calls alternate
// buffers, so one barrier per call suffices (a lane can only overwrite a buffer two calls later, past
// the next call's barrier, which every lane reaches only after reading this one).
inline uint32_t (&collective_scratch(int w, int lane))[32][8] {
  uint8_t& par = emu::g_parity[w][lane];
  uint32_t(&sc)[32][8] = emu::g_xchg[par][w];
  par ^= 1;
  return sc;
}
inline void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  const int i = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint32_t(&sc)[32][8] = collective_scratch(w, i);
  sc[i][0] = addr;
  emu::g_warp_bar[w]->arrive_and_wait();
  uint32_t out[4];
  for (int j = 0; j < 4; ++j) out[j] = lds_u32(sc[8 * j + i / 4][0] + 4 * (i % 4));
  r0 = out[0]; r1 = out[1]; r2 = out[2]; r3 = out[3];
}
// Transposed: lane i gets, of each matrix, the two b16 elements (rows 2 (i % 4), 2 (i % 4) + 1; column
// i / 4), lower row in the low half.
inline void ldmatrix_x4_trans(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  const int i = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint32_t(&sc)[32][8] = collective_scratch(w, i);
  sc[i][0] = addr;
  emu::g_warp_bar[w]->arrive_and_wait();
  uint32_t out[4];
  for (int j = 0; j < 4; ++j) {
    uint32_t half[2];
    for (int h = 0; h < 2; ++h) {
      const uint32_t row = sc[8 * j + 2 * (i % 4) + h][0];
      const uint32_t word = lds_u32(row + 4 * ((i / 4) / 2));
      half[h] = (word >> (16 * ((i / 4) % 2))) & 0xffffu;
    }
    out[j] = half[0] | (half[1] << 16);
  }
  r0 = out[0]; r1 = out[1]; r2 = out[2]; r3 = out[3];
}
// The m16n8 mma.sync forms: the lanes publish their registers (A a0..a3, B b0 b1), then each computes its
// four accumulators, k summed in order. kBits-wide elements, 32 / kBits a register in k order from the low
// bits; K = 16 elements of 16 bits (bf16, k16) or 32 of 8 (E4M3, k32): lane 4 row + (k % (K / 2)) / per,
// register (A) row >= 8 and k >= K / 2, (B) k >= K / 2.
template <int kBits, class Value>
inline void mma_m16n8(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, Value value) {
  constexpr int kPer = 32 / kBits, kK = 2 * 4 * kPer, kHalf = kK / 2;
  const int i = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint32_t(&sc)[32][8] = collective_scratch(w, i);
  for (int q = 0; q < 4; ++q) sc[i][q] = a[q];
  sc[i][4] = b0;
  sc[i][5] = b1;
  emu::g_warp_bar[w]->arrive_and_wait();
  auto element = [&](uint32_t reg, int k) { return value(reg >> (kBits * (k % kPer))); };
  auto A = [&](int r, int k) {
    return element(sc[(r % 8) * 4 + (k % kHalf) / kPer][(r >= 8) + 2 * (k >= kHalf)], k);
  };
  auto B = [&](int k, int n) { return element(sc[n * 4 + (k % kHalf) / kPer][4 + (k >= kHalf)], k); };
  const int g = i / 4, t = i % 4;
  const int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int q = 0; q < 4; ++q) {
    float s = d[q];
    for (int k = 0; k < kK; ++k) s += A(rr[q], k) * B(k, cc[q]);
    d[q] = s;
  }
}
inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_m16n8<16>(d, a, b0, b1, [](uint32_t bits) { return bf16_to_f32(static_cast<uint16_t>(bits)); });
}
inline float e4m3_value(uint8_t v);
inline void mma_e4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  mma_m16n8<8>(d, a, b0, b1, [](uint32_t bits) { return e4m3_value(static_cast<uint8_t>(bits)); });
}
}  // namespace dgemma::cuda

#include "cuda_emulator_wgmma.h"  // the warpgroup MMA operations, here in order

namespace dgemma::cuda {
// Transaction barriers and TMA (core/tma_ptx.cuh). The map: a row-major matrix [rows, cols] of elem_bytes
// elements read in boxes of box_rows x box_cols elements, laid out row after row; with `swizzle` the
// box rows are 128 bytes and take the 128-byte swizzle (16-byte chunk bits 4-6 XOR address bits 7-9).
// The defaults: bf16 boxes of 64 columns, swizzled (moe/grouped_tma_kernel.cuh's map).
struct TmaMap {
  const void* base;
  int64_t rows, cols;
  int box_rows;
  int box_cols = 64;
  int elem_bytes = 2;
  bool swizzle = true;
};
inline emu::Mbar& mbar_at(uint32_t bar) {
  auto it = emu::g_mbars.find(bar);
  if (it == emu::g_mbars.end()) {
    std::fprintf(stderr, "emulated kernel: barrier at %u used before its mbar_init\n", bar);
    std::abort();
  }
  return it->second;
}
inline void mbar_complete_if_done(emu::Mbar& m) {
  if (m.pending > 0 || m.tx != 0) return;
  for (const auto& [dst, bytes] : m.writes) std::memcpy(emu::g_smem + dst, bytes.data(), bytes.size());
  m.writes.clear();
  m.pending = m.expected;
  ++m.completed;
  ++emu::g_progress;
}
inline void mbar_init(uint32_t bar, uint32_t arrivals) {
  emu::chk(bar, 8, 8);
  emu::Mbar m;
  m.expected = m.pending = static_cast<int>(arrivals);
  emu::g_mbars[bar] = std::move(m);
}
inline void mbar_fence_init() {}
inline void mbar_arrive(uint32_t bar) {
  emu::Mbar& m = mbar_at(bar);
  if (m.pending <= 0) {
    std::fprintf(stderr, "emulated kernel: more arrivals at the barrier at %u than its count\n", bar);
    std::abort();
  }
  --m.pending;
  ++emu::g_progress;
  mbar_complete_if_done(m);
}
inline void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  mbar_at(bar).tx += bytes;
  mbar_arrive(bar);
}
inline void mbar_wait(uint32_t bar, uint32_t parity) {
  while ((mbar_at(bar).completed & 1) == parity) emu::yield_fiber();
}
// This thread's cp.async copies so far land with the barrier's phase, which they arrive on.
inline void cp_async_mbar_arrive_noinc(uint32_t bar) {
  emu::ThreadAsync& a = emu::async_state();
  emu::Mbar& m = mbar_at(bar);
  auto take = [&](const std::vector<emu::AsyncCopy>& copies) {
    for (const emu::AsyncCopy& c : copies) m.writes.emplace_back(c.dst, std::vector<unsigned char>(c.bytes, c.bytes + 16));
  };
  for (const auto& group : a.groups) take(group);
  take(a.copies);
  a.groups.clear();
  a.copies.clear();
  mbar_arrive(bar);
}
inline void tma_load_2d(uint32_t dst, const TmaMap* map, int x, int y, uint32_t bar) {
  const uint32_t eb = static_cast<uint32_t>(map->elem_bytes), row_bytes = static_cast<uint32_t>(map->box_cols) * eb;
  const uint32_t bytes = static_cast<uint32_t>(map->box_rows) * row_bytes;
  if (map->swizzle && row_bytes != 128) {
    std::fprintf(stderr, "emulated TMA: a 128-byte swizzle needs 128-byte box rows (%u)\n", row_bytes);
    std::abort();
  }
  emu::chk(dst, bytes, map->swizzle ? 1024 : 128);
  emu::chk_no_mma_read(dst, bytes);
  std::vector<unsigned char> image(bytes);
  const auto* base = static_cast<const unsigned char*>(map->base);
  for (int r = 0; r < map->box_rows; ++r)
    for (int k = 0; k < map->box_cols; ++k) {
      const int64_t row = int64_t{y} + r, col = int64_t{x} + k;
      unsigned char v[8] = {};
      if (row >= 0 && row < map->rows && col >= 0 && col < map->cols) {
        const unsigned char* src = base + (row * map->cols + col) * eb;
        emu::chk_global(src, eb);
        std::memcpy(v, src, eb);
      }
      uint32_t a = dst + static_cast<uint32_t>(r) * row_bytes + eb * static_cast<uint32_t>(k);
      if (map->swizzle) a ^= ((a >> 7) & 7) << 4;
      std::memcpy(image.data() + (a - dst), v, eb);
    }
  emu::Mbar& m = mbar_at(bar);
  m.writes.emplace_back(dst, std::move(image));
  m.tx -= bytes;
  mbar_complete_if_done(m);
}
inline void tma_load_2d_hint(uint32_t dst, const TmaMap* map, int x, int y, uint32_t bar, uint64_t) {
  tma_load_2d(dst, map, x, y, bar);
}
}  // namespace dgemma::cuda
// A warp shuffle: every lane of the warp publishes its value, then reads its partner's.
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  if (mask != 0xffffffffu) std::abort();  // the emulation knows full warps only
  const int i = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint32_t(&sc)[32][8] = dgemma::cuda::collective_scratch(w, i);
  sc[i][6] = __float_as_uint(v);
  emu::g_warp_bar[w]->arrive_and_wait();
  return __uint_as_float(sc[(i ^ lane_mask) & 31][6]);
}
inline double __shfl_xor_sync(unsigned mask, double v, int lane_mask) {
  if (mask != 0xffffffffu) std::abort();
  const int i = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint32_t(&sc)[32][8] = dgemma::cuda::collective_scratch(w, i);
  std::memcpy(&sc[i][6], &v, 8);
  emu::g_warp_bar[w]->arrive_and_wait();
  double r;
  std::memcpy(&r, &sc[(i ^ lane_mask) & 31][6], 8);
  return r;
}
// The integer collectives: every lane publishes its value, then reads the one it asks for (or all).
inline int emu_warp_publish(int v, int (&all)[32]) {
  const int i = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint32_t(&sc)[32][8] = dgemma::cuda::collective_scratch(w, i);
  sc[i][6] = static_cast<uint32_t>(v);
  emu::g_warp_bar[w]->arrive_and_wait();
  for (int l = 0; l < 32; ++l) all[l] = static_cast<int>(sc[l][6]);
  return i;
}
inline int __shfl_xor_sync(unsigned mask, int v, int lane_mask) {
  if (mask != 0xffffffffu) std::abort();
  int all[32];
  const int i = emu_warp_publish(v, all);
  return all[(i ^ lane_mask) & 31];
}
inline unsigned __ballot_sync(unsigned mask, bool pred) {
  if (mask != 0xffffffffu) std::abort();
  int all[32];
  emu_warp_publish(pred ? 1 : 0, all);
  unsigned b = 0;
  for (int l = 0; l < 32; ++l) b |= all[l] != 0 ? 1u << l : 0u;
  return b;
}
inline bool __any_sync(unsigned mask, bool pred) { return __ballot_sync(mask, pred) != 0; }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __shfl_sync(unsigned mask, int v, int src) {
  if (mask != 0xffffffffu) std::abort();
  int all[32];
  emu_warp_publish(v, all);
  return all[src & 31];
}
inline int __shfl_up_sync(unsigned mask, int v, unsigned delta) {
  if (mask != 0xffffffffu) std::abort();
  int all[32];
  const int i = emu_warp_publish(v, all);
  return i >= static_cast<int>(delta) ? all[i - static_cast<int>(delta)] : v;
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) {
  if (mask != 0xffffffffu) std::abort();
  int all[32];
  emu_warp_publish(static_cast<int>(v), all);
  unsigned m = 0;
  for (int x : all) m = std::max(m, static_cast<unsigned>(x));
  return m;
}
inline int __reduce_max_sync(unsigned mask, int v) {  // signed: the overload an int argument takes
  if (mask != 0xffffffffu) std::abort();
  int all[32];
  emu_warp_publish(v, all);
  int m = all[0];
  for (int x : all) m = std::max(m, x);
  return m;
}
inline int __reduce_min_sync(unsigned mask, int v) {
  if (mask != 0xffffffffu) std::abort();
  int all[32];
  emu_warp_publish(v, all);
  int m = all[0];
  for (int x : all) m = std::min(m, x);
  return m;
}
namespace dgemma::cuda {
// core/common.cuh's fp32 exp, cos and sin (double, rounded once) and warp reduction, for the kernels that
// use them.
inline float exp_f32(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
inline float cos_f32(float x) { return static_cast<float>(std::cos(static_cast<double>(x))); }
inline float sin_f32(float x) { return static_cast<float>(std::sin(static_cast<double>(x))); }
struct SumOp {
  template <typename T>
  T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  float operator()(float a, float b) const { return std::fmax(a, b); }
};
template <typename T, typename Op>
inline T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// core/common.cuh's block reduction (every thread gets the result).
template <typename T, typename Op>
inline T block_reduce(T v, Op op, T identity, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  T r = lane < warps ? shared[lane] : identity;
  return warp_reduce(r, op);
}
}  // namespace dgemma::cuda
