#pragma once
// The W8A8 grouped expert GEMM for few rows an expert (batch-1 denoising: ~16), on mma.sync
// m16n8k32 E4M3 (sm_89+): the small-rows structure of moe/grouped_kernel.cuh (grid (N tiles, experts),
// each CTA looping over its expert's M tiles with the (M tile, K tile) iterations flattened, so that the
// cp.async pipeline runs on across M tiles) with one-byte operands. Included after
// moe/grouped_kernel.cuh (swz, kRowBytes, the tile copies) and quant/w8a8_experts_kernel.cuh (W8a8Args,
// kBK8) by quant/w8a8_experts.cu and by the emulated unit tests (tests/unit/backend/cuda_emulator.h
// emulates mma_e4m3, summing k in order).
//
// Maths: those of the FP8 wgmma kernel (quant/w8a8_experts_kernel.cuh): per K tile of 128 the four k32
// MMAs accumulate from zero and the tile's sum is added to fp32 registers (promotion every 128 K), then
//   v = (sum * s_row) * row_scale[n]
// and the gate_up / down epilogues of moe/expert_epilogue.cuh.
//
// Layout: a stage holds BM = 16 MF activation rows and BN = 16 W weight rows of 128 bytes (128 E4M3
// values), XOR-swizzled by 16-byte chunk; K tails past Kd (a multiple of 16) are zero-filled. Warp w
// owns weight rows {8 w .. 8 w + 7} (n fragment 0) and {8 W + 8 w ..} (n fragment 1) of the tile — for
// gate_up the gate rows i and the matching up rows — for every row of the M tile, so each weight byte
// is read from shared memory once per CTA and M tile. Both operands come by ldmatrix: an 8x8 b16 matrix
// over 16-byte row chunks is exactly an m16n8k32 E4M3 fragment's four codes a lane.
#include <cstdint>

namespace dgemma::cuda {
namespace {

template <int MF, int W, int S>
struct W8a8RowsCfg {
  static constexpr int kMF = MF, kW = W, kStages = S;
  static constexpr int kThreads = 32 * W;
  static constexpr int kBM = 16 * MF, kBN = 16 * W;
  static constexpr int kAStage = kBM * kRowBytes, kBStage = kBN * kRowBytes;
  static constexpr int kSmem = S * (kAStage + kBStage) + 128;  // + the 128-byte alignment of the base
};

template <class C, bool kGateUp>
__global__ void __launch_bounds__(C::kThreads) grouped_w8a8_rows_kernel(W8a8Args g) {
  constexpr int MF = C::kMF, W = C::kW, kStages = C::kStages, kThreads = C::kThreads;
  constexpr int BM = C::kBM, BN = C::kBN, kAStage = C::kAStage, kBStage = C::kBStage;
  constexpr int kAChunks = BM * 8 / kThreads;  // 16-byte chunks a thread copies a stage
  constexpr int kBChunks = BN * 8 / kThreads;
  static_assert(kAChunks * kThreads == BM * 8 && kBChunks * kThreads == BN * 8, "whole chunks per thread");
  DG_KERNEL_DYNAMIC_SMEM(smem);

  const int e = blockIdx.y;
  const int row0 = g.offsets[e], rows = g.offsets[e + 1] - row0;
  if (rows <= 0) return;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int Kd = g.Kd, N = g.N;
  const int Nw = kGateUp ? 2 * N : N;
  const int KT = (Kd + kBK8 - 1) / kBK8;
  const int MT = (rows + BM - 1) / BM;
  const int total = MT * KT;
  const uint32_t s_a = (smem_addr(smem) + 127u) & ~127u;
  const uint32_t s_b = s_a + kStages * kAStage;
  const int chunk = tid & 7, trow = tid >> 3;

  // The copies of a stage (moe/grouped_kernel.cuh): this thread's tile rows trow + (kThreads / 8) j of
  // the weights and of the M tile's activations (rows past the expert's zero-filled, branch-free: the
  // main loop's ldmatrix / mma.sync need converged warps).
  constexpr int kStep = kThreads / 8;
  const uint8_t* w_e = g.w + static_cast<int64_t>(e) * Nw * Kd;
  const uint8_t* b_src[kBChunks];
  bool b_ok[kBChunks];
  tile_weight_rows<kGateUp>(w_e, g.w, trow, kStep, BN, blockIdx.x * (kGateUp ? BN / 2 : BN), N, Kd, b_src,
                            b_ok);
  int a_row[kAChunks];

  const uint64_t w_policy = evict_first_policy();
  int load_mt = 0, load_kt = 0;
  auto load_next = [&](int stage) {
    if (load_kt == 0)
      tile_activation_rows<kGateUp>(g.pairs, g.top_k, row0 + load_mt * BM, rows - load_mt * BM, BM, trow,
                                    kStep, a_row);
    tile_copy_stage(s_a + stage * kAStage, s_b + stage * kBStage, g.a, g.w, Kd, load_kt * kBK8 + chunk * 16,
                    trow, kStep, chunk, a_row, b_src, b_ok, w_policy);
    if (++load_kt == KT) {
      load_kt = 0;
      ++load_mt;
    }
  };

  float acc[MF][2][4];  // one K tile's MMA sums
  float sum[MF][2][4];  // their fp32 total
  zero_acc(sum);

DG_UNROLL
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < total) load_next(s);
    cp_async_commit();
  }

  // ldmatrix offsets of k32 step kk: A, lanes 0-15 rows 0-15 of chunk 2 kk, lanes 16-31 of chunk 2 kk + 1
  // (fragment mf adds 16 mf rows, which keeps the swizzle); B, lanes 0-7 / 8-15 this warp's n fragment 0
  // rows at chunks 2 kk / 2 kk + 1, lanes 16-23 / 24-31 its n fragment 1 rows.
  uint32_t a_off[4], b_off[4];
  const int b_row = 8 * warp + (lane & 7) + ((lane >> 4) ? 8 * W : 0);
DG_UNROLL
  for (int kk = 0; kk < 4; ++kk) {
    a_off[kk] = swz(lane & 15, 2 * kk + (lane >> 4));
    b_off[kk] = swz(b_row, 2 * kk + ((lane >> 3) & 1));
  }

  int mt = 0, kt = 0;
  int m_frags = min(MF, (rows + 15) / 16);  // m fragments with rows in this M tile
  int stage = 0, load_stage = kStages - 1;
  for (int it = 0; it < total; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    if (it + kStages - 1 < total) load_next(load_stage);
    cp_async_commit();
    load_stage = load_stage + 1 == kStages ? 0 : load_stage + 1;
    const uint32_t sa = s_a + stage * kAStage, sb = s_b + stage * kBStage;
    zero_acc(acc);
DG_UNROLL
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t b[4];
      ldmatrix_x4(sb + b_off[kk], b[0], b[1], b[2], b[3]);
DG_UNROLL
      for (int mf = 0; mf < MF; ++mf) {
        if (mf >= m_frags) break;  // uniform over the CTA
        uint32_t a[4];
        ldmatrix_x4(sa + a_off[kk] + mf * 16 * kRowBytes, a[0], a[1], a[2], a[3]);
        mma_e4m3(acc[mf][0], a, b[0], b[1]);
        mma_e4m3(acc[mf][1], a, b[2], b[3]);
      }
    }
DG_UNROLL
    for (int mf = 0; mf < MF; ++mf)
DG_UNROLL
      for (int nf = 0; nf < 2; ++nf)
DG_UNROLL
        for (int q = 0; q < 4; ++q) sum[mf][nf][q] += acc[mf][nf][q];

    if (++kt == KT) {
      // acc(mf, nf, q): row 16 mf + lane / 4 + 8 (q / 2) of the M tile, column 2 (lane % 4) + q % 2 of
      // the warp's n fragment nf.
      const int g_row = lane >> 2, g_col = 2 * (lane & 3);
      const float* rs_e = g.w_scale + static_cast<int64_t>(e) * Nw;
DG_UNROLL
      for (int mf = 0; mf < MF; ++mf)
DG_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int m = mt * BM + mf * 16 + g_row + 8 * h;
          if (m >= rows) continue;
          const int64_t r = row0 + m;
          // v = (sum * s_row) * row_scale[col + c] of n fragment nf's column c.
          auto scaled = [&](int nf, int c, float s_row, int col) {
            return __fmul_rn(__fmul_rn(sum[mf][nf][2 * h + c], s_row), rs_e[col + c]);
          };
          if (kGateUp) {
            const int i = blockIdx.x * (BN / 2) + 8 * warp + g_col;
            if (i >= N) continue;
            const float s_row = g.a_scale[g.pairs[r] / g.top_k];
            store_act_pair(g.out + r * N + i, [&](int c) { return scaled(0, c, s_row, i); },
                           [&](int c) { return scaled(1, c, s_row, N + i); });
          } else {
            const int p = g.pairs[r];
            const float wt = g.top_w[p], s_row = g.a_scale[r];
DG_UNROLL
            for (int nf = 0; nf < 2; ++nf) {
              const int n = blockIdx.x * BN + 8 * W * nf + 8 * warp + g_col;
              if (n >= N) continue;
              store_weighted_pair(g.out + static_cast<int64_t>(p) * N + n,
                                  [&](int c) { return scaled(nf, c, s_row, n); }, wt);
            }
          }
        }
      zero_acc(sum);
      kt = 0;
      ++mt;
      m_frags = min(MF, (rows - mt * BM + 15) / 16);
      __syncwarp();  // after the epilogue's per-lane branches
    }
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  cp_async_wait<0>();
}

}  // namespace
}  // namespace dgemma::cuda
