#pragma once
// The large-R grouped expert GEMM on Hopper warpgroup MMAs (wgmma.mma_async m64n128k16, operands read
// by the tensor cores straight from shared memory: no ldmatrix, no operand registers), included by
// moe/grouped_kernel.cuh (which provides GroupedArgs, swz, kBK, kRowBytes) and compiled on the host by
// the emulated unit tests (tests/unit/backend/cuda_emulator.h emulates wgmma_m64n128k16 from the
// descriptors). Device wrappers: core/wgmma_ptx.cuh.
//
// Same tile list, grid, copies and epilogue roundings as grouped_tile_kernel; per CTA kWarpGroups
// warpgroups, warpgroup j computing tile rows 64 j .. 64 j + 63 by all kBN columns (kBN / 128 wgmma per
// k16 step; a warpgroup past the tile's rows multiplies stale rows and stores nothing). The stage
// layout is already the 128-byte swizzle of wgmma's K-major operands (rows of 128 bytes, 16-byte chunk c of
// row r at c ^ (r % 8), groups of 8 rows 1024 bytes apart, stages 1024-byte aligned), so a descriptor is the
// address of the first row plus 32 bytes per k16 step. Per K tile: cp.async wait, async-proxy fence, barrier,
// the copies of K tile kt + kStages - 2 into the stage of kt - 2, then the wgmma of kt, committed; before
// the next barrier each warpgroup waits for kt - 1's (one group stays in flight, and the stage
// refilled after the barrier is no longer read). The tensor cores sum in their own order: outputs
// match the mma.sync kernels to fp32 rounding, not bit for bit.
#include <cstdint>

#include "backend/cuda/core/wgmma_desc.cuh"

namespace dgemma::cuda {
namespace {

template <int WG, int BN, int S, int MinBlocks>
struct WgCfg {
  static constexpr int kWarpGroups = WG, kBN = BN, kStages = S, kMinBlocks = MinBlocks;
  static constexpr int kThreads = 128 * WG;
  static constexpr int kBM = 64 * WG;
  static constexpr int kAStage = kBM * kRowBytes, kBStage = kBN * kRowBytes;
  static constexpr int kSmem = S * (kAStage + kBStage) + 1024;  // + the 1024-byte alignment of the base
  static_assert(BN % 128 == 0 && kAStage % 1024 == 0 && kBStage % 1024 == 0 && S >= 2, "tile shape");
  static_assert((kBN * 8) % kThreads == 0, "whole weight chunks per thread");
};

// The operand fence of a warpgroup's wgmma accumulators (every register: the compiler keeps them in
// place across the asynchronous MMAs).
template <int NH>
__device__ __forceinline__ void fence_acc(float (&acc)[NH][64]) {
DG_UNROLL
  for (int h = 0; h < NH; ++h)
DG_UNROLL
    for (int q = 0; q < 64; ++q) wgmma_fence_operand(acc[h][q]);
}

// The epilogue of the bf16 wgmma kernels (this one, moe/grouped_tma_kernel.cuh): a warpgroup's
// accumulator fragments, m64 block mb of the tile, stored with the mma.sync kernels' roundings
// (moe/expert_epilogue.cuh), rows >= `rows` and columns >= N skipped. frag(nf, q) is row 64 mb +
// 16 (warp % 4) + lane / 4 + 8 (q / 2), column 8 nf + 2 (lane % 4) + q % 2 (the mma.sync C layout per
// n8 fragment).
template <int NH, bool kGateUp>
__device__ __forceinline__ void store_wgmma_tile(float (&acc)[NH][64], const GroupedArgs& g, int row0,
                                                 int rows, int n0, int mb, int warp, int lane) {
  constexpr int NF = NH * 16;  // n8 fragments of a thread's accumulator rows
  const int N = g.N;
  auto frag = [&](int nf, int q) -> float& { return acc[nf >> 4][4 * (nf & 15) + q]; };
  const int g_row = lane >> 2, g_col = 2 * (lane & 3);
  const int m_base = 64 * mb + 16 * (warp & 3) + g_row;
  if (kGateUp) {
DG_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int m = m_base + 8 * h;
      if (m >= rows) continue;
      const int64_t r = row0 + m;
DG_UNROLL
      for (int nf = 0; nf < NF / 2; ++nf) {
        const int i = n0 + 8 * nf + g_col;
        if (i >= N) continue;
        store_act_pair(g.out + r * N + i, [&](int c) { return frag(nf, 2 * h + c); },
                       [&](int c) { return frag(nf + NF / 2, 2 * h + c); });
      }
    }
  } else {
    int pid[2];
    float wt[2];
DG_UNROLL
    for (int h = 0; h < 2; ++h) pid[h] = m_base + 8 * h < rows ? g.pairs[row0 + m_base + 8 * h] : -1;
DG_UNROLL
    for (int h = 0; h < 2; ++h) wt[h] = pid[h] >= 0 ? g.top_w[pid[h]] : 0.f;
DG_UNROLL
    for (int h = 0; h < 2; ++h) {
      if (pid[h] < 0) continue;
      const int64_t p = pid[h];
DG_UNROLL
      for (int nf = 0; nf < NF; ++nf) {
        const int n = n0 + 8 * nf + g_col;
        if (n >= N) continue;
        store_weighted_pair(g.out + p * N + n, [&](int c) { return frag(nf, 2 * h + c); }, wt[h]);
      }
    }
  }
}

template <class C, bool kGateUp>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) grouped_wgmma_kernel(GroupedArgs g, const int32_t* __restrict__ tiles) {
  constexpr int kThreads = C::kThreads, kStages = C::kStages, kBM = C::kBM, kBN = C::kBN;
  constexpr int kAStage = C::kAStage, kBStage = C::kBStage;
  constexpr int kRowsPerPass = kThreads / 8;
  constexpr int kACopies = kBM / kRowsPerPass;  // kBM = 64 WG, kRowsPerPass = 16 WG: 4
  constexpr int kBCopies = kBN / kRowsPerPass;
  constexpr int NH = kBN / 128;  // wgmma per k16 step
  // K tiles copied ahead: one stage is being refilled, one read by the wgmma still in flight.
  constexpr int kAhead = kStages - 2;
  static_assert(kAhead >= 1, "a wgmma group in flight needs three stages at least");
  DG_KERNEL_DYNAMIC_SMEM(smem);

  const int e = tiles[4 * blockIdx.x];
  if (e < 0) return;  // past the list's used entries; uniform over the CTA, before any barrier
  const int row0 = tiles[4 * blockIdx.x + 1], rows = tiles[4 * blockIdx.x + 2];  // 1 <= rows <= kBM
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2;
  const bool active = rows > 64 * wg;             // warpgroup-uniform
  const int copied = min(kBM, (rows + 63) & ~63);  // rows of the active warpgroups (zero-filled past rows)
  const int Kd = g.Kd, N = g.N;
  const int KT = (Kd + kBK - 1) / kBK;
  const int n0 = blockIdx.y * (kGateUp ? kBN / 2 : kBN);
  const uint32_t s_a = (smem_addr(smem) + 1023u) & ~1023u, s_b = s_a + kStages * kAStage;
  const int trow = tid >> 3, chunk = tid & 7;

  const uint16_t* w_e = g.w + static_cast<int64_t>(e) * (kGateUp ? 2 * N : N) * Kd;
  const uint16_t* b_src[kBCopies];
  bool b_ok[kBCopies];
  tile_weight_rows<kGateUp>(w_e, g.w, trow, kRowsPerPass, kBN, n0, N, Kd, b_src, b_ok);
  int a_row[kACopies];  // -2 not copied (an inactive warpgroup's rows: never stored), -1 zero-filled, else the source row
  tile_activation_rows<kGateUp>(g.pairs, g.top_k, row0, rows, copied, trow, kRowsPerPass, a_row);

  const uint64_t w_policy = evict_first_policy();
  auto load_stage = [&](int stage, int kt) {
    tile_copy_stage(s_a + stage * kAStage, s_b + stage * kBStage, g.a, g.w, Kd, kt * kBK + chunk * 8, trow, kRowsPerPass,
                    chunk, a_row, b_src, b_ok, w_policy);
  };

  float acc[NH][64];  // n8 fragment nf, element q: acc[nf / 16][4 (nf % 16) + q]
  zero_acc(acc);

  // Prologue: K tiles 0 .. kAhead - 1 (a group is committed even when empty, so the wait counts hold:
  // before iteration kt, kAhead + kt groups are committed and group kt is K tile kt).
DG_UNROLL
  for (int s = 0; s < kAhead; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kAhead - 1>();  // this thread's copies of K tile kt have landed ...
    fence_proxy_async();          // ... visible to the tensor cores' reads ...
    __syncthreads();              // ... everyone's; and every warpgroup's wgmma of K tile kt - 2 is done
    if (kt + kAhead < KT) load_stage((kt + kAhead) % kStages, kt + kAhead);  // the stage of K tile kt - 2
    cp_async_commit();
    // Every warpgroup multiplies, also one without rows (its A rows are stale, its outputs never
    // stored): a branch around the wgmma makes ptxas serialise them (C7520).
    const int stage = kt % kStages;
    const uint32_t sa = s_a + stage * kAStage + wg * 64 * kRowBytes, sb = s_b + stage * kBStage;
    fence_acc(acc);
    wgmma_fence();
DG_UNROLL
    for (int kk = 0; kk < kBK / 16; ++kk)
DG_UNROLL
      for (int h = 0; h < NH; ++h)
        wgmma_m64n128k16(acc[h], sw128_desc(sa + 32 * kk), sw128_desc(sb + h * 128 * kRowBytes + 32 * kk));
    wgmma_commit();
    fence_acc(acc);
    wgmma_wait<1>();  // K tile kt - 1's wgmma done: kt runs on while the next barrier and copies go
    fence_acc(acc);
  }
  wgmma_wait<0>();
  fence_acc(acc);
  cp_async_wait<0>();
  if (!active) return;

  store_wgmma_tile<NH, kGateUp>(acc, g, row0, rows, n0, wg, warp, lane);
}

}  // namespace
}  // namespace dgemma::cuda
