// The quantised GEMM kernels (src/backend/cuda/grouped_moe_fp4_kernel.cuh, the wgmma one of
// grouped_moe_fp4_wgmma_kernel.cuh) run on the host through cuda_emulator.h: grouped gate_up / down
// (NVFP4 and FP8, random, skewed and sized routing, every tile variant) and the dense matmul (32-, 64-
// and 128-row tiles, subnormal and zero E4M3 block scales) on weights in the device layout, against
// the format's definition computed here. The same kernel source the GPU runs; tests/gpu checks it there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda_emulator.h"
#include "backend/cuda/grouped_moe_fp4_kernel.cuh"

namespace dgemma::cuda {
namespace {

struct EmuLauncher {
  template <int MF, int W, int S, bool kGateUp, bool kFp8>
  void go(const Fp4Args& g, int64_t grid_x, int64_t grid_y) {
    emu::launch([g] { grouped_fp4_kernel<MF, W, S, kGateUp, kFp8>(g); }, static_cast<int>(grid_x), static_cast<int>(grid_y),
                smem_bytes<MF, W, S, kFp8>(), 32 * W);
    ++launches;
  }
  template <class C, bool kGateUp, bool kFp8>
  void wg(const Fp4Args& g, int64_t grid_x, int64_t grid_y) {
    emu::launch([g] { grouped_fp4_wgmma_kernel<C, kGateUp, kFp8>(g); }, static_cast<int>(grid_x), static_cast<int>(grid_y),
                C::template smem<kFp8>(), C::kThreads);
    ++launches;
    ++wg_launches;
  }
  bool wgmma = true, wgmma_auto = true;
  int launches = 0, wg_launches = 0;
};

std::mt19937 rng(7);
double e4m3(int c) { int s = c >> 7, e = (c >> 3) & 15, m = c & 7; double v = e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7); return s ? -v : v; }
double e2m1(int n) { const double mag[8] = {0, .5, 1, 1.5, 2, 3, 4, 6}; return (n & 8) ? -mag[n & 7] : mag[n & 7]; }
struct W { bool fp8; int E, N, K; std::vector<uint8_t> data, block; std::vector<float> rs;
  double at(int e, int n, int k) const {
    if (fp8) return e4m3(data[(size_t(e) * N + n) * K + k]);
    const uint8_t b = data[(size_t(e) * N + n) * (K / 2) + k / 2];
    return e2m1((b >> (4 * (k & 1))) & 15) * e4m3(block[(size_t(e) * N + n) * (K / 16) + k / 16]);
  }
  std::vector<uint8_t> dev_data() const {
    auto d = data;
    if (!fp8) zero_unscaled_blocks(d.data(), block.data(), int64_t(E) * N, K);
    repack_quant_weights(fp8, d.data(), d.size());
    return d;
  }
  std::vector<uint8_t> dev_block() const { std::vector<uint8_t> d(block.size()); if (!fp8) repack_block_scales(block.data(), d.data(), E, N, K); return d; }
};
// sub: subnormal block scales; zeros: about one block in 8 with a zero scale (+0 or -0) over random nibbles.
W make(bool fp8, int E, int N, int K, bool sub = false, bool zeros = false) {
  W w{fp8, E, N, K, {}, {}, {}};
  std::uniform_int_distribution<int> byte(0, 255);
  w.data.resize(size_t(E) * N * (fp8 ? K : K / 2));
  for (auto& b : w.data) { b = byte(rng); if (fp8 && (b & 0x7f) == 0x7f) b = 0x3f; }
  if (!fp8) {
    w.block.resize(size_t(E) * N * K / 16);
    for (auto& b : w.block) {
      b = sub ? 1 + byte(rng) % 7 : 0x20 + byte(rng) % 0x40;
      if (zeros && byte(rng) % 8 == 0) b = byte(rng) % 2 ? 0x80 : 0;
    }
  }
  w.rs.resize(size_t(E) * N);
  std::uniform_real_distribution<float> u(0.5f, 2.0f);
  for (int e = 0; e < E; ++e) for (int n0 = 0; n0 < N; n0 += N / 2) { float s = u(rng) * 0.05f; for (int n = n0; n < n0 + N / 2; ++n) w.rs[size_t(e) * N + n] = s; }
  return w;
}
std::vector<uint16_t> randx(int rows, int K) { std::normal_distribution<float> nd(0, 1); std::vector<uint16_t> x(size_t(rows) * K); for (auto& v : x) v = f32_to_bf16(nd(rng)); return x; }
// Every output element against the reference (the same fp32 products, summed in k order as the
// emulated mma does): a layout, decode or indexing error moves most elements, a summation-order
// difference none here.
void compare(const std::string& what, const std::vector<uint16_t>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  size_t off = 0;
  for (size_t i = 0; i < got.size(); ++i) off += got[i] != f32_to_bf16(want[i]);
  EXPECT_EQ(off, 0u) << what << ": " << off << " of " << got.size() << " elements differ";
}

// The grouped gate_up and down of routing `idx` ([T, K] expert ids) against the reference; returns the
// launches that took the wgmma kernel.
int moe_routed(bool fp8, int T, int H, int I, int E, int K, const std::vector<int>& idx, int variant, bool skew,
               bool zeros, int m_split = 0) {
  EmuLauncher l;
  W gu = make(fp8, E, 2 * I, H, false, zeros), dn = make(fp8, E, H, I, false, zeros);
  auto x = randx(T, H);
  const int R = T * K;
  std::vector<int32_t> offsets(E + 1, 0), pairs;
  for (int e = 0; e < E; ++e) { offsets[e] = pairs.size(); for (int p = 0; p < R; ++p) if (idx[p] == e) pairs.push_back(p); }
  offsets[E] = R;
  std::vector<float> top_w(R); for (auto& v : top_w) v = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);
  auto gud = gu.dev_data(), gub = gu.dev_block(), dnd = dn.dev_data(), dnb = dn.dev_block();
  std::vector<uint16_t> act(size_t(R) * I, 0xFFFF), y(size_t(R) * H, 0xFFFF);
  if (fp8) run_gate_up(l, true, x.data(), gud.data(), nullptr, gu.rs.data(), offsets.data(), pairs.data(), R, E, K, H, I, act.data(), variant, m_split);
  else run_gate_up(l, false, x.data(), gud.data(), gub.data(), gu.rs.data(), offsets.data(), pairs.data(), R, E, K, H, I, act.data(), variant, m_split);
  std::vector<float> act_ref(size_t(R) * I);
  std::vector<uint16_t> act_ref_b(size_t(R) * I);
  for (int e = 0; e < E; ++e) for (int r = offsets[e]; r < offsets[e + 1]; ++r) { const int t = pairs[r] / K;
    for (int i = 0; i < I; ++i) { float sg = 0, su = 0;
      for (int k = 0; k < H; ++k) { const float xv = bf16_to_f32(x[size_t(t) * H + k]); sg += xv * float(gu.at(e, i, k)); su += xv * float(gu.at(e, I + i, k)); }
      const float g = round_bf16(gelu_tanh(round_bf16(sg * gu.rs[size_t(e) * 2 * I + i]))), u = round_bf16(su * gu.rs[size_t(e) * 2 * I + I + i]);
      act_ref[size_t(r) * I + i] = round_bf16(g * u); act_ref_b[size_t(r) * I + i] = f32_to_bf16(g * u); } }
  const std::string what = std::string(fp8 ? "fp8" : "nvfp4") + " variant " + std::to_string(variant) + (skew ? " skewed" : "") +
                           " m_split " + std::to_string(m_split);
  compare(what + " gate_up", act, act_ref);
  // down on the reference act (isolates the kernel)
  if (fp8) run_down(l, true, act_ref_b.data(), dnd.data(), nullptr, dn.rs.data(), offsets.data(), pairs.data(), top_w.data(), R, E, H, I, y.data(), variant, m_split);
  else run_down(l, false, act_ref_b.data(), dnd.data(), dnb.data(), dn.rs.data(), offsets.data(), pairs.data(), top_w.data(), R, E, H, I, y.data(), variant, m_split);
  std::vector<float> y_ref(size_t(R) * H);
  for (int e = 0; e < E; ++e) for (int r = offsets[e]; r < offsets[e + 1]; ++r) { const int p = pairs[r];
    for (int n = 0; n < H; ++n) { float s = 0; for (int k = 0; k < I; ++k) s += bf16_to_f32(act_ref_b[size_t(r) * I + k]) * float(dn.at(e, n, k));
      y_ref[size_t(p) * H + n] = round_bf16(round_bf16(s * dn.rs[size_t(e) * H + n]) * top_w[p]); } }
  compare(what + " down", y, y_ref);
  EXPECT_EQ(l.launches, 2);
  return l.wg_launches;
}
// skew: every token's first choice is expert 1 (one expert with T rows: several M tiles of every variant).
int moe(bool fp8, int T, int H, int I, int E, int K, int variant, bool skew = false, bool zeros = false) {
  std::vector<int> idx(size_t(T) * K);
  for (int t = 0; t < T; ++t) {
    std::vector<int> p(E);
    for (int e = 0; e < E; ++e) p[e] = e;
    std::shuffle(p.begin(), p.end(), rng);
    if (skew) std::swap(p[0], *std::find(p.begin(), p.end(), 1));
    for (int k = 0; k < K; ++k) idx[t * K + k] = p[k];
  }
  return moe_routed(fp8, T, H, I, E, K, idx, variant, skew, zeros);
}
// Top-1 routing with the given rows per expert (tokens in a shuffled order).
int moe_sized(bool fp8, const std::vector<int>& sizes, int H, int I, int variant, bool zeros = false, int m_split = 0) {
  std::vector<int> idx;
  for (size_t e = 0; e < sizes.size(); ++e) idx.insert(idx.end(), static_cast<size_t>(sizes[e]), static_cast<int>(e));
  std::shuffle(idx.begin(), idx.end(), rng);
  return moe_routed(fp8, static_cast<int>(idx.size()), H, I, static_cast<int>(sizes.size()), 1, idx, variant, false, zeros,
                    m_split);
}
void dense(bool fp8, int T, int N, int K, bool sub = false, bool zeros = false, int variant = 0) {
  EmuLauncher l;
  W w = make(fp8, 1, N, K, sub, zeros);
  auto x = randx(T, K);
  auto d = w.dev_data(), b = w.dev_block();
  std::vector<uint16_t> out(size_t(T) * N, 0xFFFF);
  run_dense(l, fp8, x.data(), d.data(), fp8 ? nullptr : b.data(), w.rs.data(), T, N, K, out.data(), variant);
  std::vector<float> ref(size_t(T) * N);
  for (int t = 0; t < T; ++t) for (int n = 0; n < N; ++n) { float s = 0; for (int k = 0; k < K; ++k) s += bf16_to_f32(x[size_t(t) * K + k]) * float(w.at(0, n, k)); ref[size_t(t) * N + n] = round_bf16(s * w.rs[n]); }
  compare(std::string(fp8 ? "fp8" : "nvfp4") + " dense T" + std::to_string(T) + " variant " + std::to_string(variant), out, ref);
}
// Every tile variant (kQuantTiles ids 1 .. 9) and the automatic choice (0): M tiles of 16 .. 128 rows,
// 4 and 8 warps, m fragments without rows skipped, experts with several M tiles (the skewed routing).
TEST(QuantKernelEmulated, GroupedNvfp4GateUpAndDownEveryVariant) {
  for (int v = 0; v < kQuantTileCount; ++v) moe(false, 37, 64, 64, 8, 2, v);
  moe(false, 20, 128, 128, 4, 2, 0);
}
TEST(QuantKernelEmulated, GroupedNvfp4SkewedRoutingAndZeroScales) {
  for (int v = 1; v < kQuantTileCount; ++v) moe(false, 70, 64, 64, 4, 2, v, true, v % 2 == 1);
}
TEST(QuantKernelEmulated, GroupedFp8GateUpAndDownEveryVariant) {
  for (int v = 0; v < kQuantTileCount; ++v) moe(true, 37, 64, 64, 8, 2, v);
  moe(true, 20, 128, 128, 4, 2, 0);
  moe(true, 70, 64, 64, 4, 2, 1, true);
  moe(true, 70, 64, 64, 4, 2, 5, true);
}
// The wgmma kernel (variants 10 .. 12): uneven and empty experts, rows around and past the 64 / 128-row
// M tiles (several M tiles in one CTA), N edge tiles (down N = 192 against 128 / 256 columns, gate_up
// I = 64 against 128 gate rows), K of 3 stages and of 1 (fewer iterations than the pipeline's depth),
// zero NVFP4 block scales, an expert's M tiles split over 1 .. 3 CTAs (m_split: CTAs without a tile,
// CTAs with two); and the automatic choice, which takes it from ~40 rows per expert on.
TEST(QuantKernelEmulated, WgmmaUnevenAndEmptyExperts) {
  const std::vector<int> sizes = {0, 1, 63, 64, 65, 0, 129, 7};
  for (bool fp8 : {false, true})
    for (int v = kFirstQuantWgmmaTile; v < kQuantTileCount; ++v)
      EXPECT_EQ(moe_sized(fp8, sizes, 192, 64, v, v == 11, v - kFirstQuantWgmmaTile + 1), 2);
  EXPECT_EQ(moe_sized(false, {200, 0, 3, 70}, 64, 64, 10, false, 2), 2);  // 4 M tiles: 2 CTAs with 2 each
}
TEST(QuantKernelEmulated, WgmmaAutomaticChoice) {
  EXPECT_EQ(auto_quant_tile(8192, 128, true), 11);    // T = 1024 top-8: ~64 rows per expert
  EXPECT_EQ(auto_quant_tile(32768, 128, true), 12);   // T = 4096: ~256
  EXPECT_EQ(auto_quant_tile(2048, 128, true), 4);     // T = 256: ~16, the mma.sync kernel
  EXPECT_EQ(resolve_quant_tile(0, 8192, 128, true, true), 11);
  EXPECT_EQ(resolve_quant_tile(0, 8192, 128, true, false), 9);   // not allowed automatically: mma.sync
  EXPECT_EQ(resolve_quant_tile(11, 8192, 128, true, false), 11);  // asked for
  EXPECT_EQ(resolve_quant_tile(11, 8192, 128, false, true), 9);   // no wgmma on the device: mma.sync
  EXPECT_EQ(resolve_dense_tile(0, 256, true, true), 10);
  EXPECT_EQ(resolve_dense_tile(0, 256, true, false), 6);
  EXPECT_EQ(resolve_dense_tile(0, 37, true, true), 2);
  EXPECT_EQ(resolve_dense_tile(12, 37, true, false), 12);
  EXPECT_EQ(resolve_dense_tile(12, 37, false, true), 2);
  EXPECT_EQ(quant_m_split(0, 8192, 128, 64, false), 2);    // ~64 rows, 64-row tiles: 96 rows side by side
  EXPECT_EQ(quant_m_split(0, 32768, 128, 128, false), 3);  // ~256 rows, 128-row tiles
  EXPECT_EQ(quant_m_split(0, 2048, 128, 128, false), 1);
  EXPECT_EQ(quant_m_split(0, 1 << 20, 8, 64, false), 4);   // at most 4
  EXPECT_EQ(quant_m_split(0, 8192, 128, 64, true), 1);     // dense: one M tile a CTA row
  for (bool fp8 : {false, true}) {
    EXPECT_EQ(moe(fp8, 100, 64, 128, 4, 2, 0), 2);      // 50 rows per expert
    EXPECT_EQ(moe(fp8, 100, 64, 128, 8, 2, 0), 0);      // 25: mma.sync
  }
}
TEST(QuantKernelEmulated, DenseBothTileHeights) {
  for (bool fp8 : {false, true}) {
    dense(fp8, 37, 128, 128);   // 32-row tiles, a partial one
    dense(fp8, 130, 64, 128);   // 128-row tiles, a partial one
  }
  for (int v = 1; v < kQuantTileCount; ++v) dense(v % 2 == 0, 37, 128, 64, false, false, v);
}
// The wgmma kernel as the dense matmul (one CTA row per 64 / 128 rows, the last partial; N = 192
// against 128 / 256 columns; zero and subnormal NVFP4 block scales), and the automatic choice of it.
TEST(QuantKernelEmulated, WgmmaDense) {
  for (int v = kFirstQuantWgmmaTile; v < kQuantTileCount; ++v)
    for (bool fp8 : {false, true}) dense(fp8, 200, 192, 192, false, !fp8, v);
  dense(false, 70, 64, 256, true, false, 10);
  dense(true, 64, 128, 64);  // automatic: variant 10
}
TEST(QuantKernelEmulated, DenseSubnormalAndZeroBlockScales) {
  dense(false, 40, 64, 256, true);
  dense(false, 40, 64, 256, false, true);
}

}  // namespace
}  // namespace dgemma::cuda
