#pragma once
// The warp-specialised grouped expert GEMM on Hopper (sm_90a): one producer warpgroup fills a ring of
// kStages shared-memory stages, kConsumers warpgroups multiply them with wgmma, and transaction
// barriers (mbarrier, core/tma_ptx.cuh) instead of __syncthreads hand each stage back and forth, so the
// copies of the next stages run while the tensor cores work and no warp waits for another's MMA.
// Included by moe/grouped_kernel.cuh (GroupedArgs, the copy plan, kBK, kRowBytes) after
// moe/grouped_wgmma_kernel.cuh (the epilogue, store_wgmma_tile); compiled on the host by the emulated
// unit tests, whose emulation of the barriers and copies lands a stage's data only when its phase
// completes (tests/unit/backend/cuda_emulator.h).
//
// Per stage: the weight tile (kBN rows of 64 K elements) by two TMA loads of kBN / 2 rows from the
// expert weights' 2-D map [E Nw, Kd] (gate_up: the gate rows n0 .. and the up rows N + n0 ..; down:
// rows n0 .. and n0 + kBN / 2 ..; rows past the expert's belong to the next one or are zeros past the
// tensor, columns past Kd are zeros, and neither is stored), laid out by the TMA's 128-byte swizzle
// (the layout of grouped_wgmma_kernel's stages); the activation rows by the producers' cp.async
// (gate_up gathers a token's row per pair: no TMA gathers on Hopper), as tile_copy_activations.
//   full[s]:  128 producer arrivals (cp.async.mbarrier.arrive.noinc, each once its copies landed)
//             + 1 (the expect_tx of the weight bytes); the consumers wait on it, then fence the async
//             proxy (the cp.async writes are generic-proxy writes that wgmma reads).
//   empty[s]: one arrival per consumer warp once its wgmma of the stage has completed (wgmma_wait
//             of the next K tile's group); the producers wait on it before refilling the stage.
// A consumer whose 64 rows lie past the tile's (an expert's last, short tile) hands every stage back
// as soon as it is full and multiplies nothing: its rows are neither copied nor stored.
// Results and roundings as grouped_wgmma_kernel (the same wgmma sums, the same epilogue).
#include <cstdint>

namespace dgemma::cuda {
namespace {

template <int Consumers, int BN, int S, int MinBlocks = 1>
struct TmaCfg {
  static constexpr int kConsumers = Consumers, kBN = BN, kStages = S, kMinBlocks = MinBlocks;
  static constexpr int kThreads = 128 * (Consumers + 1);  // warpgroup 0 produces
  static constexpr int kBM = 64 * Consumers;
  static constexpr int kAStage = kBM * kRowBytes, kBStage = kBN * kRowBytes;
  static constexpr int kBarriers = 2 * S * 8;
  // + the 1024-byte alignment of the stages, then the barriers
  static constexpr int kSmem = S * (kAStage + kBStage) + 1024 + kBarriers;
  static_assert(BN % 128 == 0 && BN / 2 <= 256 && kAStage % 1024 == 0 && kBStage % 2048 == 0 && S >= 2, "tile shape");
};

template <class C, bool kGateUp>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks)
    grouped_tma_kernel(const __grid_constant__ TmaMap wmap, GroupedArgs g, const int32_t* __restrict__ tiles) {
  constexpr int kStages = C::kStages, kBM = C::kBM, kBN = C::kBN;
  constexpr int kAStage = C::kAStage, kBStage = C::kBStage;
  constexpr int kProducers = 128, kRowsPerPass = kProducers / 8;
  constexpr int kACopies = kBM / kRowsPerPass;
  constexpr int NH = kBN / 128;  // wgmma per k16 step
  DG_KERNEL_DYNAMIC_SMEM(smem);

  const int e = tiles[4 * blockIdx.x];
  if (e < 0) return;  // past the list's used entries; uniform over the CTA, before any barrier
  const int row0 = tiles[4 * blockIdx.x + 1], rows = tiles[4 * blockIdx.x + 2];  // 1 <= rows <= kBM
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2;  // 0: the producers; 1 ..: consumer wg - 1
  const int Kd = g.Kd, N = g.N;
  const int KT = (Kd + kBK - 1) / kBK;
  const int n0 = blockIdx.y * (kGateUp ? kBN / 2 : kBN);
  const uint32_t s_a = (smem_addr(smem) + 1023u) & ~1023u, s_b = s_a + kStages * kAStage;
  const uint32_t full = s_b + kStages * kBStage, empty = full + 8 * kStages;  // barrier s at + 8 s
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full + 8 * s, kProducers + 1);
      mbar_init(empty + 8 * s, 4 * C::kConsumers);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {  // ---- producers
    const int trow = tid >> 3, chunk = tid & 7;
    const int copied = min(kBM, (rows + 63) & ~63);  // rows of the active consumers (zero-filled past rows)
    int a_row[kACopies];
    tile_activation_rows<kGateUp>(g.pairs, g.top_k, row0, rows, copied, trow, kRowsPerPass, a_row);
    const int w_row0 = kGateUp ? e * 2 * N + n0 : e * N + n0;
    const int w_row1 = kGateUp ? w_row0 + N : w_row0 + kBN / 2;
    for (int kt = 0; kt < KT; ++kt) {
      const int s = kt % kStages;
      mbar_wait(empty + 8 * s, ((kt / kStages) & 1) ^ 1);  // the stage's previous K tile fully read
      if (tid == 0) {
        mbar_arrive_expect_tx(full + 8 * s, kBStage);
        const uint32_t sb = s_b + s * kBStage;
        tma_load_2d(sb, &wmap, kt * kBK, w_row0, full + 8 * s);
        tma_load_2d(sb + (kBN / 2) * kRowBytes, &wmap, kt * kBK, w_row1, full + 8 * s);
      }
      tile_copy_activations(s_a + s * kAStage, g.a, Kd, kt * kBK + chunk * 8, trow, kRowsPerPass, chunk, a_row);
      cp_async_mbar_arrive_noinc(full + 8 * s);
    }
    return;
  }

  // ---- consumers: warpgroup c computes tile rows 64 c .. 64 c + 63 by all kBN columns
  const int c = wg - 1;
  if (rows <= 64 * c) {  // no rows of this tile (warpgroup-uniform): hand each stage back unread
    for (int kt = 0; kt < KT; ++kt) {
      const int s = kt % kStages;
      mbar_wait(full + 8 * s, (kt / kStages) & 1);
      if (lane == 0) mbar_arrive(empty + 8 * s);
    }
    return;
  }
  float acc[NH][64];  // n8 fragment nf, element q: acc[nf / 16][4 (nf % 16) + q]
  zero_acc(acc);
  for (int kt = 0; kt < KT; ++kt) {
    const int s = kt % kStages;
    mbar_wait(full + 8 * s, (kt / kStages) & 1);
    fence_proxy_async();  // the activation rows (cp.async: the generic proxy) visible to the tensor cores
    const uint32_t sa = s_a + s * kAStage + c * 64 * kRowBytes, sb = s_b + s * kBStage;
    fence_acc(acc);
    wgmma_fence();
DG_UNROLL
    for (int kk = 0; kk < kBK / 16; ++kk)
DG_UNROLL
      for (int h = 0; h < NH; ++h)
        wgmma_m64n128k16(acc[h], sw128_desc(sa + 32 * kk), sw128_desc(sb + h * 128 * kRowBytes + 32 * kk));
    wgmma_commit();
    fence_acc(acc);
    wgmma_wait<1>();  // K tile kt - 1's wgmma done: its stage goes back to the producers
    fence_acc(acc);
    if (kt > 0 && lane == 0) mbar_arrive(empty + 8 * ((kt - 1) % kStages));
  }
  wgmma_wait<0>();
  fence_acc(acc);
  store_wgmma_tile<NH, kGateUp>(acc, g, row0, rows, n0, c, warp, lane);
}

}  // namespace
}  // namespace dgemma::cuda
