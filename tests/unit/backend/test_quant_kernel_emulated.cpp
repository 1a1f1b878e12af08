// The quantised GEMM kernel (src/backend/cuda/quant/weight_only_kernel.cuh) run on the host through
// cuda_emulator.h: grouped gate_up / down (NVFP4 and FP8, random, skewed and sized routing, every tile)
// and the dense matmul (32- and 128-row tiles, subnormal and zero E4M3 block scales) on weights in the
// device layout, against the format's definition computed here. The same kernel source the GPU runs; tests/gpu checks it there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda_emulator.h"
#include "backend/cuda/quant/weight_only_kernel.cuh"

namespace dgemma::cuda {
namespace {

struct EmuLauncher {
  template <int MF, int W, int S, int U, bool kGateUp, bool kFp8>
  void go(const Fp4Args& g, int64_t grid_x, int64_t grid_y) {
    emu::launch([g] { grouped_fp4_kernel<MF, W, S, U, kGateUp, kFp8>(g); }, static_cast<int>(grid_x), static_cast<int>(grid_y),
                smem_bytes<MF, W, S, U, kFp8>(), 32 * W);
    ++launches;
  }
  int launches = 0;
};

const std::vector<QuantTile> kTiles = quant_tiles();

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

// The grouped gate_up and down of routing `idx` ([T, K] expert ids) against the reference.
void moe_routed(bool fp8, int T, int H, int I, int E, int K, const std::vector<int>& idx, QuantTile tile, bool skew,
                bool zeros) {
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
  if (fp8) run_gate_up(l, true, x.data(), gud.data(), nullptr, gu.rs.data(), offsets.data(), pairs.data(), R, E, K, H, I, act.data(), tile);
  else run_gate_up(l, false, x.data(), gud.data(), gub.data(), gu.rs.data(), offsets.data(), pairs.data(), R, E, K, H, I, act.data(), tile);
  std::vector<float> act_ref(size_t(R) * I);
  std::vector<uint16_t> act_ref_b(size_t(R) * I);
  for (int e = 0; e < E; ++e) for (int r = offsets[e]; r < offsets[e + 1]; ++r) { const int t = pairs[r] / K;
    for (int i = 0; i < I; ++i) { float sg = 0, su = 0;
      for (int k = 0; k < H; ++k) { const float xv = bf16_to_f32(x[size_t(t) * H + k]); sg += xv * float(gu.at(e, i, k)); su += xv * float(gu.at(e, I + i, k)); }
      const float g = round_bf16(gelu_tanh(round_bf16(sg * gu.rs[size_t(e) * 2 * I + i]))), u = round_bf16(su * gu.rs[size_t(e) * 2 * I + I + i]);
      act_ref[size_t(r) * I + i] = round_bf16(g * u); act_ref_b[size_t(r) * I + i] = f32_to_bf16(g * u); } }
  const std::string what = std::string(fp8 ? "fp8" : "nvfp4") + " tile " + quant_tile_word(tile) + (skew ? " skewed" : "");
  compare(what + " gate_up", act, act_ref);
  // down on the reference act (isolates the kernel)
  if (fp8) run_down(l, true, act_ref_b.data(), dnd.data(), nullptr, dn.rs.data(), offsets.data(), pairs.data(), top_w.data(), R, E, H, I, y.data(), tile);
  else run_down(l, false, act_ref_b.data(), dnd.data(), dnb.data(), dn.rs.data(), offsets.data(), pairs.data(), top_w.data(), R, E, H, I, y.data(), tile);
  std::vector<float> y_ref(size_t(R) * H);
  for (int e = 0; e < E; ++e) for (int r = offsets[e]; r < offsets[e + 1]; ++r) { const int p = pairs[r];
    for (int n = 0; n < H; ++n) { float s = 0; for (int k = 0; k < I; ++k) s += bf16_to_f32(act_ref_b[size_t(r) * I + k]) * float(dn.at(e, n, k));
      y_ref[size_t(p) * H + n] = round_bf16(round_bf16(s * dn.rs[size_t(e) * H + n]) * top_w[p]); } }
  compare(what + " down", y, y_ref);
  EXPECT_EQ(l.launches, 2);
}
// skew: every token's first choice is expert 1 (one expert with T rows: several M tiles of every tile).
void moe(bool fp8, int T, int H, int I, int E, int K, QuantTile tile, bool skew = false, bool zeros = false) {
  std::vector<int> idx(size_t(T) * K);
  for (int t = 0; t < T; ++t) {
    std::vector<int> p(E);
    for (int e = 0; e < E; ++e) p[e] = e;
    std::shuffle(p.begin(), p.end(), rng);
    if (skew) std::swap(p[0], *std::find(p.begin(), p.end(), 1));
    for (int k = 0; k < K; ++k) idx[t * K + k] = p[k];
  }
  moe_routed(fp8, T, H, I, E, K, idx, tile, skew, zeros);
}
// Top-1 routing with the given rows per expert (tokens in a shuffled order).
void moe_sized(bool fp8, const std::vector<int>& sizes, int H, int I, QuantTile tile, bool zeros = false) {
  std::vector<int> idx;
  for (size_t e = 0; e < sizes.size(); ++e) idx.insert(idx.end(), static_cast<size_t>(sizes[e]), static_cast<int>(e));
  std::shuffle(idx.begin(), idx.end(), rng);
  moe_routed(fp8, static_cast<int>(idx.size()), H, I, static_cast<int>(sizes.size()), 1, idx, tile, false, zeros);
}
void dense(bool fp8, int T, int N, int K, bool sub = false, bool zeros = false, QuantTile tile = QuantTile::kAuto) {
  EmuLauncher l;
  W w = make(fp8, 1, N, K, sub, zeros);
  auto x = randx(T, K);
  auto d = w.dev_data(), b = w.dev_block();
  std::vector<uint16_t> out(size_t(T) * N, 0xFFFF);
  run_dense(l, fp8, x.data(), d.data(), fp8 ? nullptr : b.data(), w.rs.data(), T, N, K, out.data(), tile);
  std::vector<float> ref(size_t(T) * N);
  for (int t = 0; t < T; ++t) for (int n = 0; n < N; ++n) { float s = 0; for (int k = 0; k < K; ++k) s += bf16_to_f32(x[size_t(t) * K + k]) * float(w.at(0, n, k)); ref[size_t(t) * N + n] = round_bf16(s * w.rs[n]); }
  compare(std::string(fp8 ? "fp8" : "nvfp4") + " dense T" + std::to_string(T) + " tile " + quant_tile_word(tile), out, ref);
}
// Every tile and the automatic choice: M tiles of 32 and 128 rows, 4 and 8 warps, stages of one and
// four K steps (K = 64 / 128 / 192 / 320: fewer K steps than a stage holds, and a last stage of one
// step after a whole one), m fragments without rows skipped, experts with several M tiles (the skewed
// and sized routings).
TEST(QuantKernelEmulated, GroupedNvfp4GateUpAndDownEveryTile) {
  moe(false, 37, 64, 64, 8, 2, QuantTile::kAuto);
  for (const QuantTile t : kTiles) moe(false, 37, 64, 64, 8, 2, t);
  moe(false, 20, 128, 128, 4, 2, QuantTile::kAuto);
  for (const QuantTile t : kTiles) moe(false, 40, 320, 192, 4, 2, t);
}
TEST(QuantKernelEmulated, GroupedNvfp4SkewedRoutingAndZeroScales) {
  bool zeros = false;
  for (const QuantTile t : kTiles) moe(false, 70, 64, 64, 4, 2, t, true, zeros = !zeros);
}
TEST(QuantKernelEmulated, GroupedFp8GateUpAndDownEveryTile) {
  moe(true, 37, 64, 64, 8, 2, QuantTile::kAuto);
  for (const QuantTile t : kTiles) moe(true, 37, 64, 64, 8, 2, t);
  moe(true, 20, 128, 128, 4, 2, QuantTile::kAuto);
  moe(true, 70, 64, 64, 4, 2, QuantTile::kRows32Cols128K256, true);
  moe(true, 40, 320, 192, 4, 2, QuantTile::kRows32Cols128K256);
  moe(true, 70, 64, 64, 4, 2, QuantTile::kRows128Cols64, true);
}
// Uneven and empty experts, rows around and past the 32 / 128-row M tiles (several M tiles in one
// CTA), N edge tiles (down N = 192 against 64 / 128 columns), zero NVFP4 block scales.
TEST(QuantKernelEmulated, UnevenAndEmptyExperts) {
  const std::vector<int> sizes = {0, 1, 31, 33, 65, 0, 129, 7};
  for (bool fp8 : {false, true})
    for (const QuantTile t : kTiles) moe_sized(fp8, sizes, 192, 64, t, !fp8 && t == QuantTile::kRows128Cols64);
}
// The automatic choice: 32-row tiles of 8 warps and 256-K stages up to ~96 rows per expert, 128-row
// ones beyond; dense: 32-row tiles, 128-row ones from 128 rows on.
TEST(QuantKernelEmulated, AutomaticChoice) {
  EXPECT_EQ(auto_expert_tile(2048, 128), QuantTile::kRows32Cols128K256);  // T = 256 top-8: ~16 rows an expert
  EXPECT_EQ(auto_expert_tile(8192, 128), QuantTile::kRows32Cols128K256);  // T = 1024: ~64
  EXPECT_EQ(auto_expert_tile(12288, 128), QuantTile::kRows32Cols128K256); // ~96
  EXPECT_EQ(auto_expert_tile(12416, 128), QuantTile::kRows128Cols64);     // ~97
  EXPECT_EQ(auto_expert_tile(32768, 128), QuantTile::kRows128Cols64);      // T = 4096: ~256
  EXPECT_EQ(auto_dense_tile(37), QuantTile::kRows32Cols64);
  EXPECT_EQ(auto_dense_tile(128), QuantTile::kRows128Cols64);
}
TEST(QuantKernelEmulated, DenseBothTileHeights) {
  for (bool fp8 : {false, true}) {
    dense(fp8, 37, 128, 128);   // 32-row tiles, a partial one
    dense(fp8, 130, 64, 128);   // 128-row tiles, a partial one
  }
  bool fp8 = false;
  for (const QuantTile t : kTiles) dense(fp8 = !fp8, 37, 128, 64, false, false, t);
}
TEST(QuantKernelEmulated, DenseSubnormalAndZeroBlockScales) {
  dense(false, 40, 64, 256, true);
  dense(false, 40, 64, 256, false, true);
}

}  // namespace
}  // namespace dgemma::cuda
