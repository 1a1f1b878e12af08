#pragma once
// The W8A8 grouped expert GEMMs of FP8-dynamic experts on Hopper's FP8 warpgroup MMAs
// (wgmma.mma_async m64n128k32 .f32.e4m3.e4m3), the FP8 sibling of moe/grouped_wgmma_kernel.cuh; included
// after moe/grouped_kernel.cuh (swz, kRowBytes, WgCfg, sw128_desc, GroupedPlanImpl) by quant/w8a8_experts.cu
// and by the emulated unit tests (tests/unit/backend/cuda_emulator.h emulates wgmma_m64n128k32_e4m3
// from the descriptors). Device wrapper: core/wgmma_ptx.cuh.
//
// Maths, as the CPU reference (cpu/moe.cpp expert_gemm with ActQuant::kFp8Token): the activations are
// E4M3 codes with a per-row scale (quantised beforehand by quant/fp8_quant_kernel.cuh: gate_up's per token,
// down's per routed row of gelu(gate) * up), the weights the checkpoint's E4M3 [E, Nw, Kd] row-major
// (K-major, as wgmma's FP8 operands must be; no repack), and each output
//   v = (sum_k q[r, k] * w[n, k]) * s_row * row_scale[n]
// (products exact in fp32, the two multiplies rounded as the CPU's), then the W8A16 kernels'
// epilogues: gate_up act = bf16(bf16(gelu_tanh(bf16(v_gate))) * bf16(v_up)); down y[p] = bf16(bf16(v) *
// top_w[p]).
//
// Layout and pipeline are those of the bf16 wgmma kernel with 1-byte operands: a 128-byte stage row
// holds 128 E4M3 values (kBK8 = 128 per K tile, 16 per 16-byte chunk), and a k32 step advances both
// descriptors by 32 bytes as the bf16 k16 step does (four per K tile). Kd a multiple of 16 (whole
// chunks; a partial last K tile is zero-filled). The tensor cores sum in their own order, and an FP8
// MMA adds its products into the accumulator with fewer bits than fp32 (about 14 kept on Hopper), so
// each K tile's four k32 MMAs start from zero (scale-d 0 on the first) and the tile's sum is added to
// fp32 registers before the next tile (promotion every 128 K, as cuBLASLt without fast accumulation
// does); the wgmma of a tile is therefore waited for within its iteration (two CTAs an SM, or the
// other warpgroup, overlap it), and the accumulators twice over limit the tiles to 128 columns.
#include <cstdint>
#include <type_traits>

namespace dgemma::cuda {
namespace {

constexpr int kBK8 = kRowBytes;  // E4M3 values per K tile: one 128-byte row

struct W8a8Args {
  const uint8_t* a;         // gate_up: q_x [T, Kd] (token rows); down: q_act [R, Kd] (grouped rows)
  const float* a_scale;     // gate_up: [T]; down: [R]
  const uint8_t* w;         // [E, Nw, Kd] E4M3
  const float* w_scale;     // [E, Nw]
  const int32_t* offsets;   // [E + 1]
  const int32_t* pairs;     // [R]
  const float* top_w;       // [R] by pair id (down)
  uint16_t* out;            // gate_up: act [R, N]; down: y [R, N] by pair id
  int Kd;                   // reduction length (H for gate_up, I for down)
  int N;                    // output columns (I for gate_up, H for down)
  int top_k;                // K (gate_up: token of a pair)
};

template <class C, bool kGateUp>
__global__ void __launch_bounds__(C::kThreads, C::kMinBlocks) grouped_w8a8_kernel(W8a8Args g, const int32_t* __restrict__ tiles) {
  constexpr int kThreads = C::kThreads, kStages = C::kStages, kBM = C::kBM, kBN = C::kBN;
  constexpr int kAStage = C::kAStage, kBStage = C::kBStage;
  constexpr int kRowsPerPass = kThreads / 8;
  constexpr int kACopies = kBM / kRowsPerPass;
  constexpr int kBCopies = kBN / kRowsPerPass;
  constexpr int NF = kBN / 8;
  constexpr int NH = kBN / 128;
  // K tiles copied ahead: every stage but the one being read (the previous tile's wgmma was waited for
  // before the barrier that starts this iteration, so its stage is free to refill right after it).
  constexpr int kAhead = kStages - 1;
  static_assert(kAhead >= 1, "two stages at least");
  DG_KERNEL_DYNAMIC_SMEM(smem);

  const int e = tiles[4 * blockIdx.x];
  if (e < 0) return;  // past the list's used entries; uniform over the CTA, before any barrier
  const int row0 = tiles[4 * blockIdx.x + 1], rows = tiles[4 * blockIdx.x + 2];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wg = warp >> 2;
  const bool active = rows > 64 * wg;
  const int copied = min(kBM, (rows + 63) & ~63);
  const int Kd = g.Kd, N = g.N;
  const int KT = (Kd + kBK8 - 1) / kBK8;
  const int n0 = blockIdx.y * (kGateUp ? kBN / 2 : kBN);
  const uint32_t s_a = (smem_addr(smem) + 1023u) & ~1023u, s_b = s_a + kStages * kAStage;
  const int trow = tid >> 3, chunk = tid & 7;

  const int Nw = kGateUp ? 2 * N : N;
  const uint8_t* w_e = g.w + static_cast<int64_t>(e) * Nw * Kd;
  const uint8_t* b_src[kBCopies];
  bool b_ok[kBCopies];
  tile_weight_rows<kGateUp>(w_e, g.w, trow, kRowsPerPass, kBN, n0, N, Kd, b_src, b_ok);
  int a_row[kACopies];  // -2 not copied (an inactive warpgroup's rows), -1 zero-filled, else the source row
  tile_activation_rows<kGateUp>(g.pairs, g.top_k, row0, rows, copied, trow, kRowsPerPass, a_row);

  const uint64_t w_policy = evict_first_policy();
  auto load_stage = [&](int stage, int kt) {  // k in bytes = E4M3 values
    tile_copy_stage(s_a + stage * kAStage, s_b + stage * kBStage, g.a, g.w, Kd, kt * kBK8 + chunk * 16, trow,
                    kRowsPerPass, chunk, a_row, b_src, b_ok, w_policy);
  };

  float acc[NH][64];  // one K tile's MMA sums
  float sum[NH][64];  // their fp32 total
  zero_acc(acc);
  zero_acc(sum);
  auto frag = [&](int nf, int q) -> float& { return sum[nf >> 4][4 * (nf & 15) + q]; };

DG_UNROLL
  for (int s = 0; s < kAhead; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }

  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<kAhead - 1>();
    fence_proxy_async();
    __syncthreads();
    if (kt + kAhead < KT) load_stage((kt + kAhead) % kStages, kt + kAhead);
    cp_async_commit();
    const int stage = kt % kStages;
    const uint32_t sa = s_a + stage * kAStage + wg * 64 * kRowBytes, sb = s_b + stage * kBStage;
    fence_acc(acc);
    wgmma_fence();
DG_UNROLL
    for (int kk = 0; kk < kBK8 / 32; ++kk)
DG_UNROLL
      for (int h = 0; h < NH; ++h)
        wgmma_m64n128k32_e4m3(acc[h], sw128_desc(sa + 32 * kk), sw128_desc(sb + h * 128 * kRowBytes + 32 * kk), kk > 0);
    wgmma_commit();
    fence_acc(acc);
    wgmma_wait<0>();  // this K tile's sums, promoted to the fp32 total
    fence_acc(acc);
DG_UNROLL
    for (int h = 0; h < NH; ++h)
DG_UNROLL
      for (int q = 0; q < 64; ++q) sum[h][q] += acc[h][q];
  }
  cp_async_wait<0>();
  if (!active) return;

  // frag(nf, q): row 64 wg + 16 (warp % 4) + lane / 4 + 8 (q / 2), column 8 nf + 2 (lane % 4) + q % 2.
  const int g_row = lane >> 2, g_col = 2 * (lane & 3);
  const int m_base = 64 * wg + 16 * (warp & 3) + g_row;
  const float* rs_e = g.w_scale + static_cast<int64_t>(e) * Nw;
  if (kGateUp) {
DG_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int m = m_base + 8 * h;
      if (m >= rows) continue;
      const int64_t r = row0 + m;
      const float s_row = g.a_scale[g.pairs[r] / g.top_k];
DG_UNROLL
      for (int nf = 0; nf < NF / 2; ++nf) {
        const int i = n0 + 8 * nf + g_col;
        if (i >= N) continue;
        auto gate = [&](int c) { return __fmul_rn(__fmul_rn(frag(nf, 2 * h + c), s_row), rs_e[i + c]); };
        auto up = [&](int c) {
          return __fmul_rn(__fmul_rn(frag(nf + NF / 2, 2 * h + c), s_row), rs_e[N + i + c]);
        };
        store_act_pair(g.out + r * N + i, gate, up);
      }
    }
  } else {
    int pid[2];
    float wt[2], s_row[2];
DG_UNROLL
    for (int h = 0; h < 2; ++h) pid[h] = m_base + 8 * h < rows ? g.pairs[row0 + m_base + 8 * h] : -1;
DG_UNROLL
    for (int h = 0; h < 2; ++h) {
      wt[h] = pid[h] >= 0 ? g.top_w[pid[h]] : 0.f;
      s_row[h] = pid[h] >= 0 ? g.a_scale[row0 + m_base + 8 * h] : 0.f;
    }
DG_UNROLL
    for (int h = 0; h < 2; ++h) {
      if (pid[h] < 0) continue;
      const int64_t p = pid[h];
DG_UNROLL
      for (int nf = 0; nf < NF; ++nf) {
        const int n = n0 + 8 * nf + g_col;
        if (n >= N) continue;
        auto value = [&](int c) { return __fmul_rn(__fmul_rn(frag(nf, 2 * h + c), s_row[h]), rs_e[n + c]); };
        store_weighted_pair(g.out + p * N + n, value, wt[h]);
      }
    }
  }
}

// The shapes (the bf16 wgmma kernel's WgCfg; the same bytes per stage row): 64 x 128 tiles of one
// warpgroup. down: four stages, two CTAs an SM (two CTAs hide more of the copies than one CTA of 128
// rows saves by reading each weight tile once per 128 rows of an expert); gate_up: three stages, three
// CTAs an SM (167 registers: more warps to hide its latency, docs/BENCHMARKS.md "Kernel choices").
using W8a8Tile = WgCfg<1, 128, 4, 2>;
using W8a8GateUpTile = WgCfg<1, 128, 3, 3>;

}  // namespace
}  // namespace dgemma::cuda

// The few-rows kernel, on the definitions above.
#include "backend/cuda/quant/w8a8_rows_kernel.cuh"

namespace dgemma::cuda {
namespace {

// The few-rows kernel's shape: 32 rows x 64 weight rows, four warps, four stages (48 KB), the bf16
// small-rows kernel's bytes a stage.
using W8a8Rows = W8a8RowsCfg<2, 4, 4>;

// Which W8A8 kernel a call runs. kAuto: the few-rows kernel up to 24 rows an expert on average (the bf16
// planner's first step, moe/grouped_kernel.cuh kAutoSteps), the 64 x 128 wgmma tiles past it; kSmallRows
// the few-rows kernel at every size; any other kernel the wgmma tiles. The few-rows kernel needs no
// tile list (max_tiles 0).
inline GroupedPlanImpl w8a8_plan(int64_t R, int64_t E, MoeKernel kernel = MoeKernel::kAuto) {
  GroupedPlanImpl p;
  if (R <= 0 || E <= 0) return p;
  if (kernel == MoeKernel::kAuto)
    kernel = R <= kAutoSteps[0].max_mean_rows * E ? MoeKernel::kSmallRows : MoeKernel::kWgmma64x128;
  if (kernel == MoeKernel::kSmallRows) return p;
  p.kernel = MoeKernel::kWgmma64x128;
  p.tile_rows = W8a8Tile::kBM;
  p.max_tiles = R / p.tile_rows + E;
  return p;
}

// The launches for any launcher L with l.template w8a8<Cfg, kGateUp>(args, tiles, grid_x, grid_y) (the
// tiles) and l.template rows<Cfg, kGateUp>(args, grid_x, grid_y) (the few-rows kernel, grid_y experts).
template <bool kGateUp, class L>
void run_w8a8(L& l, const GroupedPlanImpl& plan, const W8a8Args& g, const int32_t* tiles, int64_t E) {
  if (plan.kernel == MoeKernel::kSmallRows) {
    const int64_t cols = kGateUp ? W8a8Rows::kBN / 2 : W8a8Rows::kBN;
    return l.template rows<W8a8Rows, kGateUp>(g, (g.N + cols - 1) / cols, E);
  }
  using Tile = std::conditional_t<kGateUp, W8a8GateUpTile, W8a8Tile>;
  static_assert(Tile::kBM == W8a8Tile::kBM, "one tile list for both GEMMs");
  const int64_t cols = kGateUp ? Tile::kBN / 2 : Tile::kBN;
  l.template w8a8<Tile, kGateUp>(g, tiles, plan.max_tiles, (g.N + cols - 1) / cols);
}

}  // namespace
}  // namespace dgemma::cuda
