// The W8A8 weight-streaming expert kernel (src/backend/cuda/quant/expert_stream_w8a8_kernel.cuh) run on the
// host through cuda_emulator.h (TMA, transaction barriers, FP8 wgmma m64 n16 .. n64 k32 from their
// descriptors, summing k in order) against the MoE maths of cpu/moe.cpp with FP8-dynamic experts
// computed here: the bf16 activations quantised per row by quant_ref::quantize_fp8_per_token (gate_up's per
// token, down's per grouped row of the bf16 activation; the kernel quantises them itself, in its
// prologue), per element fp32 sums in k order over each K tile of 128 added to the total tile by tile
// (the kernel's promotion; the E4M3 products are exact), then * s_row * row_scale and the CPU's
// roundings. Bit for bit: a tiling, chunking, quantisation, indexing, scale or epilogue error moves
// elements. Rows per expert 0, 1, 7, 16, 17, 40, 64, 70 and 130 (one chunk, several, a short last one),
// every chunk size, ring depths of 2 and more, CTAs of one block and several, K and N tails, the
// early prefetch (an empty expert drains it), and jitter schedules (warps sitting out) so that the
// producer and the consumers drift apart.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <random>
#include <string>
#include <vector>

#include "backend/quant_reference.h"
#include "backend/weight.h"
#include "util/bf16.h"

// clang-format off
#include "cuda_emulator.h"
#include "moe_test_routing.h"
#include "backend/cuda/quant/expert_stream_w8a8_kernel.cuh"
// clang-format on

namespace dgemma::cuda {
namespace {

struct EmuStreamLauncher {
  TmaMap map(const void* base, int64_t rows, int64_t cols, int box_cols, int box_rows, bool swizzle) {
    return TmaMap{base, rows, cols, box_rows, box_cols, 1, swizzle};
  }
  template <bool kGateUp, int kMaxRows>
  void w8a8(const TmaMap& m, const ExpertStreamArgs& g, int grid_x, int64_t grid_y, int smem) {
    emu::launch([m, g] { expert_stream_w8a8_kernel<kGateUp, kMaxRows>(m, g); }, grid_x,
                static_cast<int>(grid_y), smem, kStreamThreads);
    ++launches;
  }
  int launches = 0;
};

// Rows [n, K] of bf16 values quantised as the CPU reference does: their values and per-row scales.
struct Quantised {
  std::vector<float> values, scales;
};
Quantised quantise(const std::vector<uint16_t>& x, int64_t n, int64_t K) {
  Quantised q;
  q.values.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) q.values[i] = dgemma::bf16_to_f32(x[i]);
  q.scales.resize(static_cast<size_t>(n));
  quant_ref::quantize_fp8_per_token(q.values.data(), n, K, q.scales.data());
  return q;
}

// The kernel's summation: per K tile of 128 a sum in k order from zero, added to the total.
float tiled_dot(const float* a, const uint8_t* w, int K) {
  float total = 0;
  for (int k0 = 0; k0 < K; k0 += kW8a8StreamK) {
    float part = 0;
    for (int k = k0; k < std::min(K, k0 + kW8a8StreamK); ++k) part += a[k] * f8e4m3_to_f32(w[k]);
    total += part;
  }
  return total;
}

struct Case {
  int H, I, K;
  std::vector<int> counts;
  uint32_t seed;
};

// A plan with the requested rows a chunk, blocks a CTA and (if > 0) ring stages.
ExpertStreamPlan plan_for(bool gate_up, int Kd, int N, int R, int E, int max_rows, int bpc, int stages) {
  ExpertStreamPlan p = expert_stream_plan(gate_up, R, E, N, max_rows, bpc, 132, kW8a8StreamTwoCtaRows,
                                          [&](int rows) { return w8a8_stream_smem(Kd, rows); });
  if (stages > 0 && p.max_rows != 0) {
    p.stages = stages;
    p.smem = w8a8_stream_smem(Kd, p.max_rows).total(stages);
  }
  return p;
}

void check(const Case& cs, const std::vector<std::array<int, 3>>& plans, bool early_prefetch) {
  const int H = cs.H, I = cs.I, K = cs.K;
  std::mt19937 rng(cs.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const test::Routing route = test::random_routing(cs.counts, K, rng);
  const int E = route.E, R = route.R, T = route.T;
  const std::vector<int32_t>& offsets = route.offsets;
  const std::vector<int32_t>& pairs = route.pairs;
  const std::vector<float>& top_w = route.top_w;
  std::vector<uint16_t> x(static_cast<size_t>(T) * H);
  for (size_t i = 0; i < x.size(); ++i) x[i] = f32_to_bf16(nd(rng) * (i % 37 == 0 ? 10.0f : 1.0f));
  if (T > 2)  // an all-zero token (the floor scale) and one with a single outlier (subnormal codes)
    for (int k = 0; k < H; ++k) {
      x[static_cast<size_t>(k)] = 0;
      x[static_cast<size_t>(H) + k] = f32_to_bf16(k == 3 ? 3000.0f : 0.01f * nd(rng));
    }
  auto fp8_weights = [&](size_t n) {  // E4M3 codes of magnitude 2^-2 .. 2^2, random sign and mantissa
    std::vector<uint8_t> w(n);
    for (auto& c : w) c = static_cast<uint8_t>((rng() & 0x87) | ((5 + rng() % 5) << 3));
    return w;
  };
  const auto gate_up = fp8_weights(static_cast<size_t>(E) * 2 * I * H),
             down = fp8_weights(static_cast<size_t>(E) * H * I);
  std::vector<float> rs_gu(static_cast<size_t>(E) * 2 * I), rs_dn(static_cast<size_t>(E) * H);
  for (auto& s : rs_gu) s = std::uniform_real_distribution<float>(0.02f, 0.2f)(rng);
  for (auto& s : rs_dn) s = std::uniform_real_distribution<float>(0.02f, 0.2f)(rng);
  const Quantised qx = quantise(x, T, H);

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

  emu::g_global = {{reinterpret_cast<const unsigned char*>(x.data()), x.size() * 2},
                   {reinterpret_cast<const unsigned char*>(act_ref.data()), act_ref.size() * 2},
                   {gate_up.data(), gate_up.size()},
                   {down.data(), down.size()}};
  EmuStreamLauncher l;
  for (const auto& [max_rows, bpc, stages] : plans) {
    const std::string what = "rows a chunk " + std::to_string(max_rows) + ", blocks a CTA " +
                             std::to_string(bpc) + ", stages " + std::to_string(stages) +
                             (early_prefetch ? ", early prefetch" : "");
    const ExpertStreamPlan pg = plan_for(true, H, I, R, E, max_rows, bpc, stages);
    const ExpertStreamPlan pd = plan_for(false, I, H, R, E, max_rows, bpc, stages);
    ASSERT_NE(pg.max_rows, 0) << what;
    ASSERT_NE(pd.max_rows, 0) << what;
    std::vector<uint16_t> act(static_cast<size_t>(R) * I, 0xFFFF), y(static_cast<size_t>(R) * H, 0xFFFF);
    ExpertStreamArgs gu;
    gu.x = x.data();
    gu.row_scale = rs_gu.data();
    gu.offsets = offsets.data();
    gu.pairs = pairs.data();
    gu.out = act.data();
    gu.Kd = H;
    gu.N = I;
    gu.top_k = K;
    run_expert_stream_w8a8<true>(l, pg, gu, gate_up.data(), E, early_prefetch);
    size_t diff = 0;
    for (size_t i = 0; i < act.size(); ++i) diff += act[i] != act_ref[i];
    EXPECT_EQ(diff, 0u) << "gate_up H" << H << " I" << I << ", " << what;
    ExpertStreamArgs dn;
    dn.x = act_ref.data();  // the reference activation: down checked on its own
    dn.row_scale = rs_dn.data();
    dn.offsets = offsets.data();
    dn.pairs = pairs.data();
    dn.top_w = top_w.data();
    dn.out = y.data();
    dn.Kd = I;
    dn.N = H;
    run_expert_stream_w8a8<false>(l, pd, dn, down.data(), E, early_prefetch);
    diff = 0;
    for (size_t i = 0; i < y.size(); ++i) diff += y[i] != y_ref[i];
    EXPECT_EQ(diff, 0u) << "down H" << H << " I" << I << ", " << what;
  }
  emu::g_global.clear();
}

// gate_up K = 272 (two K tiles + 16: the promotion between tiles, a K tail), I = 80 (a full block and
// a 16-column one); down K = 80 (one partial K tile), 272 outputs (two blocks and a 16-row one whose
// second tile lies past N). Every chunk size and MMA N: 1, 7, 16, 17, 40, 64, 70 and 130 rows and an
// empty expert; 2-stage rings (every stage refilled), CTAs of one block and of all.
TEST(ExpertStreamW8a8Emulated, EveryChunkSizeOnRaggedRouting) {
  const Case cs{272, 80, 4, {0, 1, 7, 16, 17, 40, 64, 70, 130}, 5};
  check(cs, {{16, 1, 2}, {32, 3, 3}, {64, 2, 2}, {64, 1, 0}}, false);
}

// The early prefetch (the first stages before the grid dependency wait): an empty expert waits for
// them to land and reads nothing else; the others as without it.
TEST(ExpertStreamW8a8Emulated, EarlyPrefetchAndEmptyExperts) {
  const Case cs{128, 64, 2, {0, 9, 0, 33, 0}, 11};
  check(cs, {{32, 1, 2}, {16, 2, 0}}, true);
}

// Producers and consumers drifting apart: warps sit out random runs of rounds (three schedules).
TEST(ExpertStreamW8a8Emulated, JitterSchedules) {
  const Case cs{272, 80, 8, {17, 3, 48, 0, 66}, 13};
  for (uint64_t seed : {3u, 77u, 1234u}) {
    emu::g_jitter_seed = seed;
    check(cs, {{16, 2, 2}, {64, 1, 3}}, seed == 77u);
    emu::g_jitter_seed = 0;
  }
}

// K past the 3,072 values a lane's registers keep (the quantisation's second pass over the row).
TEST(ExpertStreamW8a8Emulated, LongRowsTwoPassQuantisation) {
  const Case cs{3200, 16, 2, {5, 20}, 17};
  check(cs, {{32, 1, 3}}, false);
}

TEST(ExpertStreamW8a8Emulated, Plans) {
  auto lay = [](int Kd) { return [Kd](int rows) { return w8a8_stream_smem(Kd, rows); }; };
  // 26B gate_up at batch 1 (~16 rows an expert): 32 rows a chunk, one CTA an SM, 8 stages.
  ExpertStreamPlan p =
      expert_stream_plan(true, 256 * 8, 128, 704, 0, 0, 132, kW8a8StreamTwoCtaRows, lay(2816));
  EXPECT_EQ(p.max_rows, 32);
  EXPECT_EQ(p.ctas_per_sm, 1);
  EXPECT_EQ(p.stages, 8);
  EXPECT_EQ(p.blocks, 11);
  EXPECT_LE(p.smem, kStreamMaxSmem);
  // 16 rows a chunk: two CTAs an SM with 4 stages each.
  p = expert_stream_plan(true, 256 * 8, 128, 704, 16, 0, 132, kW8a8StreamTwoCtaRows, lay(2816));
  EXPECT_EQ(p.ctas_per_sm, 2);
  EXPECT_GE(p.stages, 3);
  EXPECT_LE(2 * (p.smem + 1024), kStreamSmemPerSm);
  // 64 rows a chunk at K = 2816: 176 KB of codes leave 3 stages.
  p = expert_stream_plan(true, 1024 * 8, 128, 704, 0, 0, 132, kW8a8StreamTwoCtaRows, lay(2816));
  EXPECT_EQ(p.max_rows, 64);
  EXPECT_EQ(p.stages, 3);
  EXPECT_LE(p.smem, kStreamMaxSmem);
  // down (K = 704): 22 blocks of 128 rows.
  p = expert_stream_plan(false, 256 * 8, 128, 2816, 0, 0, 132, kW8a8StreamTwoCtaRows, lay(704));
  EXPECT_EQ(p.blocks, 22);
  EXPECT_GE(p.stages, 3);
  // A requested size that does not exist, and one that cannot fit.
  EXPECT_EQ(expert_stream_plan(true, 100, 4, 64, 48, 0, 132, kW8a8StreamTwoCtaRows, lay(256)).max_rows, 0);
  EXPECT_EQ(expert_stream_plan(true, 100, 4, 64, 64, 0, 132, kW8a8StreamTwoCtaRows, lay(1 << 15)).max_rows, 0);
  // Automatic blocks per CTA: about two CTAs per resident slot, never more than the blocks.
  p = expert_stream_plan(true, 256 * 8, 128, 704, 32, 0, 132, kW8a8StreamTwoCtaRows, lay(2816));
  EXPECT_EQ(p.blocks_per_cta, 6);
  EXPECT_EQ(expert_stream_plan(true, 8, 1, 704, 32, 50, 132, kW8a8StreamTwoCtaRows, lay(2816)).blocks_per_cta,
            11);
}

}  // namespace
}  // namespace dgemma::cuda
