// The W4A16 / W8A16 weight-streaming expert kernel (src/backend/cuda/quant/expert_stream_w4a16_kernel.cuh)
// run on the host through cuda_emulator.h (TMA of the packed tiles and of the NVFP4 scale codes,
// transaction barriers, bf16 wgmma m64 n16 .. n64 k16 with A from registers, summing k in order)
// against the format's definition computed here (NVFP4: e2m1 * e4m3 block scale; FP8: e4m3; times the
// row scale after the fp32 sum in k order, then the CPU's roundings), bit for bit, and bit for bit
// against the mma.sync kernel of quant/weight_only_kernel.cuh on the same weights in the device layout:
// the same arithmetic. Rows per expert 0, 1, 7, 16, 17, 40, 64, 70 and 130, every chunk size, ring
// depths of 2 and more, CTAs of one block and several, K tails (K = 192: NVFP4 stages of 256 K cut
// short; FP8 half stages), N tails, zero and subnormal NVFP4 block scales, the early prefetch, and
// jitter schedules.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

// clang-format off
#include "cuda_emulator.h"
#include "moe_test_routing.h"
#include "backend/cuda/quant/weight_only_kernel.cuh"
#include "backend/cuda/quant/expert_stream_w4a16_kernel.cuh"
// clang-format on

namespace dgemma::cuda {
namespace {

struct EmuStreamLauncher {
  TmaMap map(const void* base, int64_t rows, int64_t cols, int box_cols, int box_rows, bool swizzle) {
    return TmaMap{base, rows, cols, box_rows, box_cols, 1, swizzle};
  }
  template <bool kGateUp, bool kFp8, int kMaxRows>
  void w4a16(const TmaMap& wm, const TmaMap& sm, const ExpertStreamArgs& g, int grid_x, int64_t grid_y,
             int smem) {
    emu::launch([wm, sm, g] { expert_stream_w4a16_kernel<kGateUp, kFp8, kMaxRows>(wm, sm, g); }, grid_x,
                static_cast<int>(grid_y), smem, kW4a16Threads);
  }
};
// The mma.sync kernel's launcher (quant/weight_only_kernel.cuh run_gate_up / run_down).
struct EmuMmaLauncher {
  template <int MF, int W, int S, bool kGateUp, bool kFp8>
  void go(const Fp4Args& g, int64_t grid_x, int64_t grid_y) {
    emu::launch([g] { grouped_fp4_kernel<MF, W, S, kGateUp, kFp8>(g); }, static_cast<int>(grid_x),
                static_cast<int>(grid_y), smem_bytes<MF, W, S, kFp8>(), 32 * W);
  }
};

double e4m3(int c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  const double v = e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return s ? -v : v;
}
double e2m1(int n) {
  static const double mag[8] = {0, .5, 1, 1.5, 2, 3, 4, 6};
  return (n & 8) ? -mag[n & 7] : mag[n & 7];
}
// A quantised expert stack [E, N, K] in the checkpoint layout and its device layout (quant/layout.h).
struct Weights {
  bool fp8;
  int E, N, K;
  std::vector<uint8_t> data, block, dev, dev_block;
  std::vector<float> rs;
  float at(int e, int n, int k) const {
    if (fp8) return static_cast<float>(e4m3(data[(size_t(e) * N + n) * K + k]));
    const uint8_t b = data[(size_t(e) * N + n) * (K / 2) + k / 2];
    return static_cast<float>(e2m1((b >> (4 * (k & 1))) & 15) *
                              e4m3(block[(size_t(e) * N + n) * (K / 16) + k / 16]));
  }
};
// sub: subnormal block scales; zeros: about one block in 8 with a zero scale (+0 or -0).
Weights make(std::mt19937& rng, bool fp8, int E, int N, int K, bool sub, bool zeros) {
  Weights w{fp8, E, N, K, {}, {}, {}, {}, {}};
  std::uniform_int_distribution<int> byte(0, 255);
  w.data.resize(size_t(E) * N * (fp8 ? K : K / 2));
  for (auto& b : w.data) {
    b = static_cast<uint8_t>(byte(rng));
    if (fp8 && (b & 0x7f) == 0x7f) b = 0x3f;  // no NaN codes
  }
  if (!fp8) {
    w.block.resize(size_t(E) * N * K / 16);
    for (auto& b : w.block) {
      b = static_cast<uint8_t>(sub ? 1 + byte(rng) % 7 : 0x20 + byte(rng) % 0x40);
      if (zeros && byte(rng) % 8 == 0) b = byte(rng) % 2 ? 0x80 : 0;
    }
  }
  w.rs.resize(size_t(E) * N);
  for (auto& s : w.rs) s = std::uniform_real_distribution<float>(0.02f, 0.1f)(rng);
  w.dev = w.data;
  if (!fp8) zero_unscaled_blocks(w.dev.data(), w.block.data(), int64_t{E} * N, K);
  repack_quant_weights(fp8, w.dev.data(), static_cast<int64_t>(w.dev.size()));
  if (!fp8) {
    w.dev_block.resize(w.block.size());
    repack_block_scales(w.block.data(), w.dev_block.data(), E, N, K);
  }
  return w;
}

struct Case {
  bool fp8;
  int H, I, K;
  std::vector<int> counts;
  uint32_t seed;
  bool sub = false, zeros = false;
};

ExpertStreamPlan plan_for(bool gate_up, bool fp8, int Kd, int N, int R, int E, int max_rows, int bpc,
                          int stages) {
  auto lay = [&](int rows) {
    return fp8 ? w4a16_stream_smem<true>(gate_up, Kd, rows) : w4a16_stream_smem<false>(gate_up, Kd, rows);
  };
  ExpertStreamPlan p = expert_stream_plan(gate_up, R, E, N, max_rows, bpc, 132, kW4a16StreamTwoCtaRows, lay);
  if (stages > 0 && p.max_rows != 0) {
    p.stages = stages;
    p.smem = lay(p.max_rows).total(stages);
  }
  return p;
}

template <bool kGateUp>
void run_stream(EmuStreamLauncher& l, bool fp8, const ExpertStreamPlan& p, const ExpertStreamArgs& g,
                const Weights& w, bool early) {
  if (fp8)
    run_expert_stream_w4a16<kGateUp, true>(l, p, g, w.dev.data(), nullptr, w.E, early);
  else
    run_expert_stream_w4a16<kGateUp, false>(l, p, g, w.dev.data(), w.dev_block.data(), w.E, early);
}

size_t count_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return d;
}

void check(const Case& cs, const std::vector<std::array<int, 3>>& plans, bool early_prefetch) {
  const int H = cs.H, I = cs.I, K = cs.K;
  std::mt19937 rng(cs.seed);
  const test::Routing route = test::random_routing(cs.counts, K, rng);
  const int E = route.E, R = route.R, T = route.T;
  const std::vector<int32_t>& offsets = route.offsets;
  const std::vector<int32_t>& pairs = route.pairs;
  const std::vector<float>& top_w = route.top_w;
  const Weights gu = make(rng, cs.fp8, E, 2 * I, H, cs.sub, cs.zeros),
                dn = make(rng, cs.fp8, E, H, I, cs.sub, cs.zeros);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> x(static_cast<size_t>(T) * H);
  for (auto& v : x) v = f32_to_bf16(nd(rng));

  std::vector<uint16_t> act_ref(static_cast<size_t>(R) * I), y_ref(static_cast<size_t>(R) * H);
  for (int e = 0; e < E; ++e)
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
      const int t = pairs[r] / K;
      for (int i = 0; i < I; ++i) {
        float sg = 0, su = 0;
        for (int k = 0; k < H; ++k) {
          const float xv = bf16_to_f32(x[size_t(t) * H + k]);
          sg += xv * gu.at(e, i, k);
          su += xv * gu.at(e, I + i, k);
        }
        const float g = round_bf16(gelu_tanh(round_bf16(sg * gu.rs[size_t(e) * 2 * I + i])));
        act_ref[size_t(r) * I + i] = f32_to_bf16(g * round_bf16(su * gu.rs[size_t(e) * 2 * I + I + i]));
      }
    }
  for (int e = 0; e < E; ++e)
    for (int r = offsets[e]; r < offsets[e + 1]; ++r) {
      const int p = pairs[r];
      for (int n = 0; n < H; ++n) {
        float s = 0;
        for (int k = 0; k < I; ++k) s += bf16_to_f32(act_ref[size_t(r) * I + k]) * dn.at(e, n, k);
        y_ref[size_t(p) * H + n] = f32_to_bf16(round_bf16(s * dn.rs[size_t(e) * H + n]) * top_w[p]);
      }
    }

  // The mma.sync kernel on the same device-layout weights: bit for bit the reference here too.
  {
    EmuMmaLauncher ml;
    std::vector<uint16_t> act(static_cast<size_t>(R) * I, 0xFFFF), y(static_cast<size_t>(R) * H, 0xFFFF);
    run_gate_up(ml, cs.fp8, x.data(), gu.dev.data(), cs.fp8 ? nullptr : gu.dev_block.data(), gu.rs.data(),
                offsets.data(), pairs.data(), R, E, K, H, I, act.data());
    run_down(ml, cs.fp8, act_ref.data(), dn.dev.data(), cs.fp8 ? nullptr : dn.dev_block.data(), dn.rs.data(),
             offsets.data(), pairs.data(), top_w.data(), R, E, H, I, y.data());
    ASSERT_EQ(count_diff(act, act_ref), 0u) << "the mma.sync kernel's gate_up";
    ASSERT_EQ(count_diff(y, y_ref), 0u) << "the mma.sync kernel's down";
  }

  emu::g_global = {{reinterpret_cast<const unsigned char*>(x.data()), x.size() * 2},
                   {reinterpret_cast<const unsigned char*>(act_ref.data()), act_ref.size() * 2},
                   {gu.dev.data(), gu.dev.size()},
                   {dn.dev.data(), dn.dev.size()}};
  if (!cs.fp8) {
    emu::g_global.emplace_back(gu.dev_block.data(), gu.dev_block.size());
    emu::g_global.emplace_back(dn.dev_block.data(), dn.dev_block.size());
  }
  EmuStreamLauncher l;
  for (const auto& [max_rows, bpc, stages] : plans) {
    const std::string what = std::string(cs.fp8 ? "FP8" : "NVFP4") + " H" + std::to_string(H) + " I" +
                             std::to_string(I) + ", rows a chunk " + std::to_string(max_rows) +
                             ", blocks a CTA " + std::to_string(bpc) + ", stages " + std::to_string(stages) +
                             (early_prefetch ? ", early prefetch" : "");
    const ExpertStreamPlan pg = plan_for(true, cs.fp8, H, I, R, E, max_rows, bpc, stages);
    const ExpertStreamPlan pd = plan_for(false, cs.fp8, I, H, R, E, max_rows, bpc, stages);
    ASSERT_NE(pg.max_rows, 0) << what;
    ASSERT_NE(pd.max_rows, 0) << what;
    std::vector<uint16_t> act(static_cast<size_t>(R) * I, 0xFFFF), y(static_cast<size_t>(R) * H, 0xFFFF);
    ExpertStreamArgs a;
    a.x = x.data();
    a.row_scale = gu.rs.data();
    a.offsets = offsets.data();
    a.pairs = pairs.data();
    a.out = act.data();
    a.Kd = H;
    a.N = I;
    a.top_k = K;
    run_stream<true>(l, cs.fp8, pg, a, gu, early_prefetch);
    EXPECT_EQ(count_diff(act, act_ref), 0u) << "gate_up, " << what;
    ExpertStreamArgs d;
    d.x = act_ref.data();  // the reference activation: down checked on its own
    d.row_scale = dn.rs.data();
    d.offsets = offsets.data();
    d.pairs = pairs.data();
    d.top_w = top_w.data();
    d.out = y.data();
    d.Kd = I;
    d.N = H;
    run_stream<false>(l, cs.fp8, pd, d, dn, early_prefetch);
    EXPECT_EQ(count_diff(y, y_ref), 0u) << "down, " << what;
  }
  emu::g_global.clear();
}

// gate_up K = 320 (NVFP4: a stage of 256 K and one of 64; FP8: two stages and a half), I = 128 (two
// blocks); down K = 128 and 320 outputs (two blocks of 128 and one of 64 rows, whose second tile lies
// past N). Every chunk size and MMA N over 0 .. 130 rows, 2-stage rings, CTAs of one block and several.
TEST(ExpertStreamW4a16Emulated, Nvfp4EveryChunkSizeOnRaggedRouting) {
  const Case cs{false, 320, 128, 4, {0, 1, 7, 16, 17, 40, 64, 70, 130}, 5};
  check(cs, {{16, 1, 2}, {32, 2, 3}, {64, 1, 2}, {64, 3, 0}}, false);
}
TEST(ExpertStreamW4a16Emulated, Fp8EveryChunkSizeOnRaggedRouting) {
  const Case cs{true, 320, 128, 4, {0, 1, 7, 16, 17, 40, 64, 70, 130}, 6};
  check(cs, {{16, 1, 2}, {32, 2, 3}, {64, 1, 2}}, false);
}

// An N tail (down H = 192: a block of 64 rows whose second tile lies past N; the device layout needs
// K, so I, a multiple of 64) and K = 192 (NVFP4: one stage of three 64-K sub-stages; FP8 one and a
// half), zero and subnormal block scales.
TEST(ExpertStreamW4a16Emulated, Nvfp4TailsZeroAndSubnormalScales) {
  check(Case{false, 192, 128, 2, {3, 0, 21, 50}, 7, false, true}, {{32, 1, 2}, {64, 2, 3}}, false);
  check(Case{false, 192, 64, 2, {9, 33}, 8, true, false}, {{16, 1, 3}}, false);
}
TEST(ExpertStreamW4a16Emulated, Fp8Tails) {
  check(Case{true, 192, 128, 2, {3, 0, 21, 50}, 9}, {{32, 1, 2}}, false);
}

// The early prefetch: an empty expert waits for its stages to land and reads nothing else.
TEST(ExpertStreamW4a16Emulated, EarlyPrefetchAndEmptyExperts) {
  check(Case{false, 128, 64, 2, {0, 9, 0, 33, 0}, 11}, {{32, 1, 2}, {16, 2, 0}}, true);
}

// Producers and consumers drifting apart (three schedules).
TEST(ExpertStreamW4a16Emulated, JitterSchedules) {
  for (uint64_t seed : {3u, 77u, 1234u}) {
    emu::g_jitter_seed = seed;
    check(Case{seed == 77u, 320, 64, 8, {17, 3, 48, 0, 66}, 13}, {{16, 2, 2}, {64, 1, 3}}, seed == 3u);
    emu::g_jitter_seed = 0;
  }
}

TEST(ExpertStreamW4a16Emulated, Plans) {
  auto lay4 = [](bool gate_up, int Kd) {
    return [gate_up, Kd](int rows) { return w4a16_stream_smem<false>(gate_up, Kd, rows); };
  };
  // 26B gate_up at batch 1: twice the mean (32 rows) leaves 2 stages of 18 KB: 16 rows, 7 stages.
  ExpertStreamPlan p =
      expert_stream_plan(true, 256 * 8, 128, 704, 0, 0, 132, kW4a16StreamTwoCtaRows, lay4(true, 2816));
  EXPECT_EQ(p.max_rows, 16);
  EXPECT_EQ(p.stages, 7);
  EXPECT_EQ(p.ctas_per_sm, 1);
  EXPECT_LE(p.smem, kStreamMaxSmem);
  // Asked for 32: 2 stages.
  p = expert_stream_plan(true, 256 * 8, 128, 704, 32, 0, 132, kW4a16StreamTwoCtaRows, lay4(true, 2816));
  EXPECT_EQ(p.max_rows, 32);
  EXPECT_EQ(p.stages, 2);
  // 64 rows of bf16 at K = 2816 (352 KB) never fit.
  EXPECT_EQ(expert_stream_plan(true, 256 * 8, 128, 704, 64, 0, 132, kW4a16StreamTwoCtaRows, lay4(true, 2816))
                .max_rows,
            0);
  // down (K = 704): 32 rows, two CTAs an SM with 3 stages each, 22 blocks.
  p = expert_stream_plan(false, 256 * 8, 128, 2816, 0, 0, 132, kW4a16StreamTwoCtaRows, lay4(false, 704));
  EXPECT_EQ(p.max_rows, 32);
  EXPECT_EQ(p.ctas_per_sm, 2);
  EXPECT_EQ(p.stages, 3);
  EXPECT_LE(2 * (p.smem + 1024), kStreamSmemPerSm);
  EXPECT_EQ(p.blocks, 22);
}

}  // namespace
}  // namespace dgemma::cuda
