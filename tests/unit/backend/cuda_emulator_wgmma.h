#pragma once
// The warpgroup MMA (wgmma) part of the CUDA emulator: included by cuda_emulator.h at its place among the
// other operations (it uses the emulator's shared memory, checks and warp collectives), never on its own.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace dgemma::cuda {

// Warpgroup MMA (core/wgmma_ptx.cuh): each thread computes its own accumulator elements from shared memory
// through the descriptors (K-major, 128-byte swizzle: row r, element k at start + (r / 8) * stride +
// (r % 8) * 128 + 2 k, 16-byte chunk bits 4-6 XOR row bits 7-9; or MN-major, wgmma_operand_mn), summing
// k in order as the mma above, when it waits for the MMA's group (wgmma_wait; emu::ThreadAsync); the
// fences and register caps are no-ops.
inline void fence_proxy_async() {}
inline void wgmma_fence() {}
inline void wgmma_fence_operand(float&) {}
inline void wgmma_fence_operand(uint32_t&) {}
inline void wgmma_check_swizzle(uint64_t desc) {
  if ((desc >> 62) != 1) {
    std::fprintf(stderr, "emulated wgmma: descriptor swizzle mode %u (only 128-byte swizzle emulated)\n", static_cast<unsigned>(desc >> 62));
    std::abort();
  }
}
// Byte `kbyte` (< 128) of row `row` of a K-major operand.
inline uint32_t wgmma_addr(uint64_t desc, int row, int kbyte) {
  wgmma_check_swizzle(desc);
  const uint32_t start = static_cast<uint32_t>(desc & 0x3FFF) << 4, stride = static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4;
  uint32_t a = start + static_cast<uint32_t>(row / 8) * stride + static_cast<uint32_t>(row % 8) * 128 + static_cast<uint32_t>(kbyte);
  return a ^ (((a >> 7) & 7) << 4);
}
// The MN-major form (the transposed B): element (k, n) of a K x N bf16 operand at start + (n / 64) LBO
// + (k / 8) SBO + (k % 8) 128 + 2 (n % 64), swizzled as above (core/wgmma_desc.cuh sw128_mn_desc).
inline uint32_t wgmma_addr_mn(uint64_t desc, int k, int n) {
  wgmma_check_swizzle(desc);
  const uint32_t start = static_cast<uint32_t>(desc & 0x3FFF) << 4, lbo = static_cast<uint32_t>((desc >> 16) & 0x3FFF) << 4,
                 sbo = static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4;
  uint32_t a = start + static_cast<uint32_t>(n / 64) * lbo + static_cast<uint32_t>(k / 8) * sbo +
               static_cast<uint32_t>(k % 8) * 128 + 2 * static_cast<uint32_t>(n % 64);
  return a ^ (((a >> 7) & 7) << 4);
}
inline float smem_bf16(uint32_t a) {
  emu::chk(a, 2, 2);
  uint16_t v;
  std::memcpy(&v, emu::g_smem + a, 2);
  return bf16_to_f32(v);
}
inline float wgmma_operand(uint64_t desc, int row, int k) { return smem_bf16(wgmma_addr(desc, row, 2 * k)); }
inline float wgmma_operand_mn(uint64_t desc, int k, int n) { return smem_bf16(wgmma_addr_mn(desc, k, n)); }
// At the issue: the units of the MMA's shared-memory operands (32 bytes of K of each K-major row, of
// A's 64 rows and B's n; or B's 16 MN-major K rows of n elements) count as read until it is performed.
inline void wgmma_track(emu::AsyncMma& m) {
  auto add = [&](uint32_t a) {
    emu::chk(a, 1, 1);
    m.units.push_back(a / 16);
  };
  if (!m.a_regs)
    for (int r = 0; r < 64; ++r) add(wgmma_addr(m.da, r, 0)), add(wgmma_addr(m.da, r, 16));
  if (m.b_mn) {
    for (int k = 0; k < 16; ++k)
      for (int n = 0; n < m.n; n += 8) add(wgmma_addr_mn(m.db, k, n));
  } else {
    for (int r = 0; r < m.n; ++r) add(wgmma_addr(m.db, r, 0)), add(wgmma_addr(m.db, r, 16));
  }
  for (uint32_t u : m.units) ++emu::g_mma_reads[u];
}
inline emu::AsyncMma wgmma_op(float* d, uint64_t da, uint64_t db) {
  emu::AsyncMma m;
  m.d = d;
  m.da = da;
  m.db = db;
  return m;
}
inline void wgmma_issue(emu::AsyncMma&& m) {
  wgmma_track(m);
  emu::async_state().mmas.push_back(std::move(m));
}
// A bf16 MMA of shape m64 n k16 at its wait: this thread's accumulator elements d[4 i + q] (row
// 16 (warp % 4) + lane / 4 + 8 (q / 2), column 8 i + 2 (lane % 4) + q % 2), k summed in order.
inline void wgmma_run(const emu::AsyncMma& m) {
  const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3;
  const int g = lane / 4, t = lane % 4, cols = m.n / 4;
  // The operands of this thread's 2 rows and n / 4 columns, read once.
  float a[2][16], b[64][16];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k) a[h][k] = m.a_regs ? m.a_vals[h][k] : wgmma_operand(m.da, 16 * wq + g + 8 * h, k);
  for (int j = 0; j < cols; ++j) {
    const int col = 8 * (j / 2) + 2 * t + j % 2;
    for (int k = 0; k < 16; ++k) b[j][k] = m.b_mn ? wgmma_operand_mn(m.db, k, col) : wgmma_operand(m.db, col, k);
  }
  for (int i = 0; i < m.n / 8; ++i)
    for (int q = 0; q < 4; ++q) {
      const float* ar = a[q / 2];
      const float* bc = b[2 * i + q % 2];
      float s = m.accumulate ? m.d[4 * i + q] : 0.0f;
      for (int k = 0; k < 16; ++k) s += ar[k] * bc[k];
      m.d[4 * i + q] = s;
    }
}
inline void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db) { wgmma_issue(wgmma_op(d, da, db)); }
inline void wgmma_commit() {
  emu::ThreadAsync& a = emu::async_state();
  a.mma_groups.push_back(std::move(a.mmas));
  a.mmas.clear();
}
// The flash attention forms: scores m64 n32 / n80 (both operands K-major in shared memory), and P.V
// m64 n256 with A from registers and B MN-major. A register operand is gathered at the issue, a warp
// collective (the lanes of a row's quad publish their fragments, as for mma_bf16): a kernel can only
// change the registers after the issue in its own copy, and reads of B still happen at the wait.
inline void wgmma_m64n80k16(float (&d)[40], uint64_t da, uint64_t db, bool accumulate) {
  emu::AsyncMma m = wgmma_op(d, da, db);
  m.accumulate = accumulate;
  m.n = 80;
  wgmma_issue(std::move(m));
}
inline void wgmma_m64n32k16(float (&d)[16], uint64_t da, uint64_t db, bool accumulate) {
  emu::AsyncMma m = wgmma_op(d, da, db);
  m.accumulate = accumulate;
  m.n = 32;
  wgmma_issue(std::move(m));
}
inline void named_barrier_sync(int id, int threads) {
  auto& b = emu::g_named_bars[id];
  if (!b) b = std::make_unique<emu::Barrier>(threads);
  b->arrive_and_wait();
}
inline void wgmma_m64n256k16_rs_mn(float (&d)[128], const uint32_t (&a)[4], uint64_t db) {
  const int i = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint32_t(&sc)[32][8] = collective_scratch(w, i);
  for (int q = 0; q < 4; ++q) sc[i][q] = a[q];
  emu::g_warp_bar[w]->arrive_and_wait();
  emu::AsyncMma m = wgmma_op(d, 0, db);
  m.n = 256;
  m.b_mn = true;
  m.a_regs = true;
  const int g = i / 4;
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 16; ++k) {
      const uint32_t reg = sc[g * 4 + (k % 8) / 2][h + 2 * (k >= 8)];
      m.a_vals[h][k] = bf16_to_f32(static_cast<uint16_t>(reg >> (16 * (k % 2))));
    }
  wgmma_issue(std::move(m));
}
template <int N> inline void setmaxnreg_dec() {}
template <int N> inline void setmaxnreg_inc() {}
inline void wgmma_run_e4m3(float* d, int n, uint64_t da, uint64_t db, bool accumulate);
template <int N> inline void wgmma_wait() {
  emu::ThreadAsync& a = emu::async_state();
  while (a.mma_groups.size() > static_cast<size_t>(N)) {
    for (const emu::AsyncMma& m : a.mma_groups.front()) {
      if (m.fp8) wgmma_run_e4m3(m.d, m.n, m.da, m.db, m.accumulate);
      else wgmma_run(m);
      for (uint32_t u : m.units) --emu::g_mma_reads[u];
    }
    a.mma_groups.erase(a.mma_groups.begin());
  }
}
// The FP8 form: operands of one byte (E4M3, element k of a row at byte k of the swizzled row).
inline float wgmma_operand_e4m3(uint64_t desc, int row, int k) {
  if ((desc >> 62) != 1) {
    std::fprintf(stderr, "emulated wgmma: descriptor swizzle mode %u (only 128-byte swizzle emulated)\n", static_cast<unsigned>(desc >> 62));
    std::abort();
  }
  const uint32_t start = static_cast<uint32_t>(desc & 0x3FFF) << 4, stride = static_cast<uint32_t>((desc >> 32) & 0x3FFF) << 4;
  uint32_t a = start + static_cast<uint32_t>(row / 8) * stride + static_cast<uint32_t>(row % 8) * 128 + static_cast<uint32_t>(k);
  a ^= ((a >> 7) & 7) << 4;
  emu::chk(a, 1, 1);
  return e4m3_value(emu::g_smem[a]);
}
inline float e4m3_value(uint8_t v) {
  const float sign = (v & 0x80) ? -1.0f : 1.0f;
  const int ex = (v >> 3) & 0xf, mant = v & 7;
  if (ex == 0xf && mant == 7) return std::nanf("");
  return sign * (ex == 0 ? std::ldexp(static_cast<float>(mant), -9) : std::ldexp(1.0f + mant / 8.0f, ex - 7));
}
// The FP8 MMA (m64 n k32) on the operands at the moment of the wait (accumulate false: d = A . B^T).
inline void wgmma_run_e4m3(float* d, int n, uint64_t da, uint64_t db, bool accumulate) {
  const int lane = threadIdx.x & 31, wq = (threadIdx.x >> 5) & 3;
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < n / 8; ++i)
    for (int q = 0; q < 4; ++q) {
      const int r = 16 * wq + g + 8 * (q / 2), c = 8 * i + 2 * t + q % 2;
      float acc = accumulate ? d[4 * i + q] : 0.0f;
      for (int k = 0; k < 32; ++k) acc += wgmma_operand_e4m3(da, r, k) * wgmma_operand_e4m3(db, c, k);
      d[4 * i + q] = acc;
    }
}
inline void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t da, uint64_t db, bool accumulate) {
  emu::AsyncMma m = wgmma_op(d, da, db);  // 32 one-byte elements: the bf16 forms' bytes
  m.fp8 = true;
  m.accumulate = accumulate;
  wgmma_issue(std::move(m));
}
}  // namespace dgemma::cuda
