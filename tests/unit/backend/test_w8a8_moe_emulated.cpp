// The W8A8 grouped expert kernels (src/backend/cuda/quant/w8a8_experts_kernel.cuh) run on the host through
// cuda_emulator.h (FP8 wgmma emulated from its descriptors, summing k in order) against the MoE maths
// of cpu/moe.cpp with FP8-dynamic experts computed here: activations quantised per row by
// quant_ref::quantize_fp8_per_token (gate_up's per token, down's per grouped row of the bf16 activation),
// per element fp32 sums in k order over each K tile of 128 added to the total tile by tile (the
// kernel's promotion; the E4M3 products are exact), then * s_row * row_scale and the CPU's roundings,
// on ragged routings with N and K tails: a tiling, indexing, scale or epilogue error moves elements,
// bit for bit otherwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/quant_reference.h"
#include "backend/weight.h"
#include "util/bf16.h"

// clang-format off
#include "cuda_emulator.h"
#include "moe_test_routing.h"
#include "backend/cuda/moe/grouped_kernel.cuh"
#include "backend/cuda/quant/w8a8_experts_kernel.cuh"
// clang-format on

namespace dgemma::cuda {
namespace {

struct EmuW8a8Launcher {
  template <class C, bool kGateUp>
  void w8a8(const W8a8Args& g, const int32_t* tiles, int64_t grid_x, int64_t grid_y) {
    emu::launch([g, tiles] { grouped_w8a8_kernel<C, kGateUp>(g, tiles); }, static_cast<int>(grid_x),
                static_cast<int>(grid_y), C::kSmem, C::kThreads);
  }
  template <class C, bool kGateUp>
  void rows(const W8a8Args& g, int64_t grid_x, int64_t grid_y) {
    emu::launch([g] { grouped_w8a8_rows_kernel<C, kGateUp>(g); }, static_cast<int>(grid_x),
                static_cast<int>(grid_y), C::kSmem, C::kThreads);
  }
};

using test::tile_list;

// Rows [n, K] of bf16 values quantised as the CPU reference does: the E4M3 codes, their values, the
// per-row scales.
struct Quantised {
  std::vector<uint8_t> codes;
  std::vector<float> values, scales;
};
Quantised quantise(const std::vector<uint16_t>& x, int64_t n, int64_t K) {
  Quantised q;
  q.values.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) q.values[i] = dgemma::bf16_to_f32(x[i]);
  q.scales.resize(static_cast<size_t>(n));
  quant_ref::quantize_fp8_per_token(q.values.data(), n, K, q.scales.data());
  q.codes.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) q.codes[i] = dgemma::f32_to_f8e4m3(q.values[i]);
  return q;
}

// The kernel's summation: per K tile of kBK8 a sum in k order from zero, added to the total.
float tiled_dot(const float* a, const uint8_t* w, int K) {
  float total = 0;
  for (int k0 = 0; k0 < K; k0 += kBK8) {
    float part = 0;
    for (int k = k0; k < std::min(K, k0 + kBK8); ++k) part += a[k] * f8e4m3_to_f32(w[k]);
    total += part;
  }
  return total;
}

void check(int H, int I, int K, const std::vector<int>& counts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const test::Routing route = test::random_routing(counts, K, rng);
  const int E = route.E, R = route.R, T = route.T;
  const std::vector<int32_t>& offsets = route.offsets;
  const std::vector<int32_t>& pairs = route.pairs;
  const std::vector<float>& top_w = route.top_w;
  std::vector<uint16_t> x(static_cast<size_t>(T) * H);
  for (size_t i = 0; i < x.size(); ++i) x[i] = f32_to_bf16(nd(rng) * (i % 37 == 0 ? 10.0f : 1.0f));
  auto fp8_weights = [&](size_t n) {  // E4M3 codes of magnitude 2^-2 .. 2^2, random sign and mantissa
    std::vector<uint8_t> w(n);
    for (auto& c : w) c = static_cast<uint8_t>((rng() & 0x87) | ((5 + rng() % 5) << 3));
    return w;
  };
  const auto gate_up = fp8_weights(static_cast<size_t>(E) * 2 * I * H), down = fp8_weights(static_cast<size_t>(E) * H * I);
  std::vector<float> rs_gu(static_cast<size_t>(E) * 2 * I), rs_dn(static_cast<size_t>(E) * H);
  for (auto& s : rs_gu) s = std::uniform_real_distribution<float>(0.02f, 0.2f)(rng);
  for (auto& s : rs_dn) s = std::uniform_real_distribution<float>(0.02f, 0.2f)(rng);
  const Quantised qx = quantise(x, T, H);

  // Reference: gate_up, then the down input quantised per grouped row, then down.
  std::vector<uint16_t> act_ref(static_cast<size_t>(R) * I), y_ref(static_cast<size_t>(R) * H);
  for (int e = 0; e < E; ++e)
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
      const int t = pairs[r] / K;
      for (int i = 0; i < I; ++i) {
        const uint8_t* wg = gate_up.data() + (static_cast<size_t>(e) * 2 * I + i) * H;
        const uint8_t* wu = wg + static_cast<size_t>(I) * H;
        const float* xt = qx.values.data() + static_cast<size_t>(t) * H;
        float sg = tiled_dot(xt, wg, H), su = tiled_dot(xt, wu, H);
        sg = sg * qx.scales[static_cast<size_t>(t)] * rs_gu[static_cast<size_t>(e) * 2 * I + i];
        su = su * qx.scales[static_cast<size_t>(t)] * rs_gu[static_cast<size_t>(e) * 2 * I + I + i];
        const float g = round_bf16(gelu_tanh(round_bf16(sg)));
        act_ref[static_cast<size_t>(r) * I + i] = f32_to_bf16(g * round_bf16(su));
      }
    }
  const Quantised qa = quantise(act_ref, R, I);
  for (int e = 0; e < E; ++e)
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
      const int p = pairs[r];
      for (int n = 0; n < H; ++n) {
        const uint8_t* wd = down.data() + (static_cast<size_t>(e) * H + n) * I;
        float s = tiled_dot(qa.values.data() + static_cast<size_t>(r) * I, wd, I);
        s = s * qa.scales[static_cast<size_t>(r)] * rs_dn[static_cast<size_t>(e) * H + n];
        y_ref[static_cast<size_t>(p) * H + n] = f32_to_bf16(round_bf16(s) * top_w[p]);
      }
    }

  EmuW8a8Launcher l;
  for (MoeKernel kernel : {MoeKernel::kWgmma64x128, MoeKernel::kSmallRows}) {
    const GroupedPlanImpl plan = w8a8_plan(R, E, kernel);
    const std::string name = kernel == MoeKernel::kSmallRows ? "few-rows" : "wgmma tiles";
    const std::vector<int32_t> tiles =
        plan.max_tiles > 0 ? tile_list(offsets, plan.tile_rows, plan.max_tiles) : std::vector<int32_t>{};
    std::vector<uint16_t> act(static_cast<size_t>(R) * I, 0xFFFF), y(static_cast<size_t>(R) * H, 0xFFFF);
    const W8a8Args gu{qx.codes.data(), qx.scales.data(), gate_up.data(), rs_gu.data(), offsets.data(), pairs.data(),
                      nullptr, act.data(), H, I, K};
    run_w8a8<true>(l, plan, gu, tiles.data(), E);
    size_t diff = 0;
    for (size_t i = 0; i < act.size(); ++i) diff += act[i] != act_ref[i];
    EXPECT_EQ(diff, 0u) << name << " gate_up H" << H << " I" << I;
    const W8a8Args dn{qa.codes.data(), qa.scales.data(), down.data(), rs_dn.data(), offsets.data(), pairs.data(),
                      top_w.data(), y.data(), I, H, 1};
    run_w8a8<false>(l, plan, dn, tiles.data(), E);
    diff = 0;
    for (size_t i = 0; i < y.size(); ++i) diff += y[i] != y_ref[i];
    EXPECT_EQ(diff, 0u) << name << " down H" << H << " I" << I;
  }
}

// gate_up K = 272 (two K tiles + 16: the promotion between tiles), down K = 80 (one partial K tile);
// gate_up 80 and down 272 output columns: partial N tiles of every shape. Rows: an empty expert, 1
// row, 70 and 130 (several tiles of 64, one past 128), 3.
TEST(W8a8MoeEmulated, RaggedRouting) { check(272, 80, 2, {0, 1, 70, 130, 3}, 5); }

// Tile boundaries: experts of exactly 64 and 128 rows and one past, whole K tiles only (gate_up K =
// 128) and the smallest K (down K = 16, one chunk a row); top-8 routing.
TEST(W8a8MoeEmulated, TileBoundariesAndShortK) { check(128, 16, 8, {64, 128, 129, 0, 2}, 9); }

// The plan: the few-rows kernel (no tile list) up to 24 rows an expert on average, the 64 x 128 tiles
// past it; a forced kernel at every size.
TEST(W8a8MoeEmulated, Plan) {
  EXPECT_EQ(w8a8_plan(0, 128).max_tiles, 0);
  const GroupedPlanImpl few = w8a8_plan(256 * 8, 128);  // batch-1 denoising: 16 rows an expert
  EXPECT_EQ(few.kernel, MoeKernel::kSmallRows);
  EXPECT_EQ(few.max_tiles, 0);
  EXPECT_EQ(w8a8_plan(1024 * 8, 128).kernel, MoeKernel::kWgmma64x128);  // batch 4: 64 rows an expert
  const GroupedPlanImpl p = w8a8_plan(1000, 7);
  EXPECT_EQ(p.kernel, MoeKernel::kWgmma64x128);
  EXPECT_EQ(p.tile_rows, 64);
  EXPECT_EQ(p.max_tiles, 1000 / 64 + 7);
  EXPECT_EQ(w8a8_plan(1000, 7, MoeKernel::kSmallRows).kernel, MoeKernel::kSmallRows);
  EXPECT_EQ(w8a8_plan(256 * 8, 128, MoeKernel::kWgmma64x128).kernel, MoeKernel::kWgmma64x128);
  EXPECT_EQ(w8a8_plan(256 * 8, 128, MoeKernel::kTma128x256).kernel, MoeKernel::kWgmma64x128);
}

}  // namespace
}  // namespace dgemma::cuda
