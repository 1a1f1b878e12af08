#pragma once
// A host emulation of the CUDA operations the quantised GEMM kernel uses (the list is in
// src/backend/cuda/grouped_moe_fp4_kernel.cuh), so that the kernel itself runs in the unit tests of a
// machine without a GPU: a block is one std::thread per CUDA thread with std::barrier for __syncthreads and for the
// warp-collective ldmatrix / mma.sync, shared memory a buffer whose every access is bounds- and
// alignment-checked, cp.async a synchronous copy. The fragment layouts are the PTX ISA's
// (ldmatrix: lane i gets word i % 4 of row i / 4 of each matrix, whose row addresses come from lanes
// 8 j .. 8 j + 7; m16n8k16: A row g = lane / 4 (+8), k = 2 (lane % 4) (+8); B k likewise, n = lane / 4;
// C rows g (+8), cols 2 (lane % 4) (+1)). The device path is checked by tests/gpu; this checks the
// kernel's indexing, device layout and decoding wherever the unit tests run. Blocks of up to 8 warps. Not a general emulator:
// no asynchrony, no memory model, a warp's lanes only meet at the collectives.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define DG_KERNEL_DYNAMIC_SMEM(name) unsigned char* name = emu::smem()
typedef void* cudaStream_t;
struct Dim3 { unsigned x = 0, y = 0, z = 0; };
namespace emu {
inline thread_local Dim3 t_thread, t_block;
inline unsigned char* g_smem = nullptr;
inline uint32_t g_smem_bytes = 0;
inline void chk(uint32_t a, uint32_t n, uint32_t align) {
  if (a + n > g_smem_bytes || a % align) {
    std::fprintf(stderr, "emulated kernel: shared access at %u (+%u, alignment %u) outside %u bytes\n", a, n, align, g_smem_bytes);
    std::abort();
  }
}
inline std::barrier<>* g_block_bar = nullptr;
constexpr int kMaxWarps = 8;
inline std::barrier<>* g_warp_bar[kMaxWarps];
inline uint32_t g_scratch[kMaxWarps][32][8];
inline unsigned char* smem() { return g_smem; }
inline void launch(std::function<void()> fn, int gx, int gy, int smem_bytes, int threads = 128) {
  if (threads % 32 || threads / 32 > kMaxWarps) std::abort();
  std::vector<unsigned char> buf(static_cast<size_t>(smem_bytes) + 256, 0xCD);
  for (int by = 0; by < gy; ++by)
    for (int bx = 0; bx < gx; ++bx) {
      g_smem = buf.data();
      g_smem_bytes = static_cast<uint32_t>(smem_bytes);
      std::fill(buf.begin(), buf.end(), 0xCD);
      std::barrier<> bb(threads);
      std::vector<std::unique_ptr<std::barrier<>>> wb;
      for (int w = 0; w < threads / 32; ++w) {
        wb.push_back(std::make_unique<std::barrier<>>(32));
        g_warp_bar[w] = wb.back().get();
      }
      g_block_bar = &bb;
      std::vector<std::thread> th;
      for (int t = 0; t < threads; ++t)
        th.emplace_back([&, t] {
          t_thread.x = t;
          t_block.x = bx;
          t_block.y = by;
          fn();
          // an exiting thread must not leave others waiting at a barrier: drop it from future phases
          g_block_bar->arrive_and_drop();
          g_warp_bar[t / 32]->arrive_and_drop();
        });
      for (auto& x : th) x.join();
    }
}
}  // namespace emu
#define threadIdx emu::t_thread
#define blockIdx emu::t_block
inline void __syncthreads() { emu::g_block_bar->arrive_and_wait(); }
inline void __syncwarp() {}  // a warp's lanes only meet at the collectives
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t in = x | (static_cast<uint64_t>(y) << 32);
  uint32_t r = 0;
  for (int n = 0; n < 4; ++n) r |= static_cast<uint32_t>((in >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
  return r;
}
using std::min;
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
inline void cp_async16(uint32_t dst, const void* src, bool valid) {
  emu::chk(dst, 16, 16);
  if (valid) std::memcpy(emu::g_smem + dst, src, 16); else std::memset(emu::g_smem + dst, 0, 16);
}
inline void cp_async16_hint(uint32_t dst, const void* src, bool valid, uint64_t) { cp_async16(dst, src, valid); }
inline uint64_t evict_first_policy() { return 0; }
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}
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
inline void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  const int i = threadIdx.x & 31, w = threadIdx.x >> 5;
  emu::g_scratch[w][i][0] = addr;
  emu::g_warp_bar[w]->arrive_and_wait();
  uint32_t out[4];
  for (int j = 0; j < 4; ++j) out[j] = lds_u32(emu::g_scratch[w][8 * j + i / 4][0] + 4 * (i % 4));
  emu::g_warp_bar[w]->arrive_and_wait();
  r0 = out[0]; r1 = out[1]; r2 = out[2]; r3 = out[3];
}
inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int i = threadIdx.x & 31, w = threadIdx.x >> 5;
  for (int q = 0; q < 4; ++q) emu::g_scratch[w][i][q] = a[q];
  emu::g_scratch[w][i][4] = b0;
  emu::g_scratch[w][i][5] = b1;
  emu::g_warp_bar[w]->arrive_and_wait();
  auto A = [&](int r, int k) {
    const uint32_t reg = emu::g_scratch[w][(r % 8) * 4 + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)];
    return bf16_to_f32(static_cast<uint16_t>(reg >> (16 * (k % 2))));
  };
  auto B = [&](int k, int n) {
    const uint32_t reg = emu::g_scratch[w][n * 4 + (k % 8) / 2][4 + (k >= 8)];
    return bf16_to_f32(static_cast<uint16_t>(reg >> (16 * (k % 2))));
  };
  const int g = i / 4, t = i % 4;
  const int rr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  float out[4];
  for (int q = 0; q < 4; ++q) {
    float s = d[q];
    for (int k = 0; k < 16; ++k) s += A(rr[q], k) * B(k, cc[q]);
    out[q] = s;
  }
  emu::g_warp_bar[w]->arrive_and_wait();
  for (int q = 0; q < 4; ++q) d[q] = out[q];
}
}  // namespace dgemma::cuda
