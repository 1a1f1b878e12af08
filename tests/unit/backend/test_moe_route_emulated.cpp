// The MoE routing kernels (src/backend/cuda/moe/route_kernel.cuh) run on the host through
// cuda_emulator.h, bit for bit against the routing maths of cpu/moe.cpp written out here with the
// kernels' fp32 exp (double, rounded once): the softmax over E experts summed in index order, the top
// K by probability (ties to the lower index), the weights p / sum(p of the K) times the expert's
// scale, the slot order by ascending expert; then the grouping, the stable sort of the (token, slot)
// pairs by expert, its offsets and the tile list (the fused kernel, then place_pairs_kernel). Several
// blocks' worth of tokens, a partial last block, E of one to eight register slots per lane.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "util/bf16.h"

// The emulator first: it provides the device operations that the kernel headers use.
// clang-format off
#include "cuda_emulator.h"
#include "backend/cuda/moe/expert_groups.cuh"
#include "backend/cuda/moe/route_kernel.cuh"
// clang-format on

namespace dgemma::cuda {
namespace {

struct Routing {
  std::vector<int32_t> top_idx, order, offsets, pairs, tiles;
  std::vector<float> top_w;
};

// The reference: per token the softmax, the top K, the weights and the slot order; then the grouping.
Routing reference(const std::vector<uint16_t>& logits, const std::vector<uint16_t>& pes, int T, int E, int K,
                  int tile_rows, int max_tiles) {
  Routing r;
  r.top_idx.resize(static_cast<size_t>(T) * K);
  r.top_w.resize(r.top_idx.size());
  r.order.resize(r.top_idx.size());
  std::vector<float> p(static_cast<size_t>(E));
  std::vector<int32_t> idx(static_cast<size_t>(E));
  for (int t = 0; t < T; ++t) {
    float mx = -INFINITY;
    for (int e = 0; e < E; ++e) mx = std::max(mx, bf16_to_f32(logits[static_cast<size_t>(t) * E + e]));
    float sum = 0;
    for (int e = 0; e < E; ++e) {
      p[e] = exp_f32(bf16_to_f32(logits[static_cast<size_t>(t) * E + e]) - mx);
      sum += p[e];
    }
    for (int e = 0; e < E; ++e) p[e] /= sum;
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + K, idx.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float wsum = 0;
    for (int k = 0; k < K; ++k) wsum += p[idx[k]];
    for (int k = 0; k < K; ++k) {
      r.top_idx[static_cast<size_t>(t) * K + k] = idx[k];
      r.top_w[static_cast<size_t>(t) * K + k] = (p[idx[k]] / wsum) * bf16_to_f32(pes[idx[k]]);
    }
    std::vector<int> slots(static_cast<size_t>(K));
    std::iota(slots.begin(), slots.end(), 0);
    std::stable_sort(slots.begin(), slots.end(), [&](int a, int b) { return idx[a] < idx[b]; });
    for (int j = 0; j < K; ++j) r.order[static_cast<size_t>(t) * K + j] = slots[j];
  }
  const int R = T * K;
  r.offsets.assign(static_cast<size_t>(E) + 1, 0);
  for (int q = 0; q < R; ++q) ++r.offsets[r.top_idx[q] + 1];
  for (int e = 0; e < E; ++e) r.offsets[e + 1] += r.offsets[e];
  std::vector<int32_t> next(r.offsets.begin(), r.offsets.end() - 1);
  r.pairs.resize(static_cast<size_t>(R));
  for (int q = 0; q < R; ++q) r.pairs[next[r.top_idx[q]]++] = q;
  for (int e = 0; e < E; ++e)
    for (int32_t row = r.offsets[e]; row < r.offsets[e + 1]; row += tile_rows)
      r.tiles.insert(r.tiles.end(), {e, row, std::min(tile_rows, r.offsets[e + 1] - row), 0});
  while (static_cast<int>(r.tiles.size()) < 4 * max_tiles) r.tiles.insert(r.tiles.end(), {-1, 0, 0, 0});
  return r;
}

template <int kPer>
Routing run_fused(const std::vector<uint16_t>& logits, const std::vector<uint16_t>& pes, int T, int E, int K,
                  int tile_rows, int max_tiles) {
  Routing r;
  const int R = T * K;
  r.top_idx.assign(static_cast<size_t>(R), -7);
  r.top_w.assign(static_cast<size_t>(R), -7.0f);
  r.order.assign(static_cast<size_t>(R), -7);
  r.offsets.assign(static_cast<size_t>(E) + 1, -7);
  r.pairs.assign(static_cast<size_t>(R), -7);
  r.tiles.assign(static_cast<size_t>(4 * max_tiles), -7);
  const int blocks = (T + kRouteTokens - 1) / kRouteTokens;
  std::vector<int32_t> scratch(static_cast<size_t>(blocks) * E + R, -7);
  unsigned ticket = 0;
  RouteLaunch a{logits.data(), T, E, K, pes.data(), nullptr, r.top_idx.data(), r.top_w.data(), r.order.data(),
                r.offsets.data(), r.pairs.data(), reinterpret_cast<int4*>(r.tiles.data()), max_tiles, tile_rows,
                scratch.data(), scratch.data() + static_cast<size_t>(blocks) * E, &ticket};
  emu::launch([a] { route_group_kernel<kPer>(a); }, blocks, 1, 0, kRouteWarps * 32);
  emu::launch([a, K] { place_pairs_kernel(a, kRouteTokens * K); }, (R + 255) / 256, 1, 0, 256);
  EXPECT_EQ(ticket, 0u) << "the last block resets the ticket for the next launch";
  return r;
}

template <int kPer>
void check(int T, int E, int K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<uint16_t> logits(static_cast<size_t>(T) * E), pes(static_cast<size_t>(E));
  for (auto& v : logits) v = f32_to_bf16(nd(rng));
  for (size_t i = 0; i < logits.size(); i += 13) logits[i] = logits[i / 2];  // some equal logits: ties
  for (auto& v : pes) v = f32_to_bf16(std::uniform_real_distribution<float>(0.5f, 1.5f)(rng));
  const int R = T * K, tile_rows = 64, max_tiles = R / tile_rows + E;
  const Routing want = reference(logits, pes, T, E, K, tile_rows, max_tiles);
  const std::string shape = "T" + std::to_string(T) + " E" + std::to_string(E) + " K" + std::to_string(K);
  const Routing got = run_fused<kPer>(logits, pes, T, E, K, tile_rows, max_tiles);
  EXPECT_EQ(got.top_idx, want.top_idx) << shape;
  EXPECT_EQ(got.top_w, want.top_w) << shape;
  EXPECT_EQ(got.order, want.order) << shape;
  EXPECT_EQ(got.offsets, want.offsets) << shape;
  EXPECT_EQ(got.pairs, want.pairs) << shape;
  EXPECT_EQ(got.tiles, want.tiles) << shape;
}

TEST(MoeRouteEmulated, EightSlotsPerLaneManyBlocks) { check<4>(37, 128, 8, 1); }  // 10 blocks, the last partial
TEST(MoeRouteEmulated, FewExpertsOneSlot) { check<1>(9, 8, 2, 2); }
TEST(MoeRouteEmulated, TwoSlotsAndOddK) { check<2>(6, 48, 5, 3); }
TEST(MoeRouteEmulated, TwoHundredFiftySixExperts) { check<8>(5, 256, 8, 4); }

}  // namespace
}  // namespace dgemma::cuda
