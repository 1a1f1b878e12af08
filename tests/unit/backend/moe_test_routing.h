#pragma once
// The routing and tile list that the emulated grouped-MoE kernel tests (test_grouped_moe_emulated.cpp,
// test_w8a8_moe_emulated.cpp) feed the kernels: what moe/grouped.cu's routing and grouping kernels
// produce on the device, built on the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace dgemma::cuda::test {

// `counts` rows per expert: offsets [E + 1], pair ids a random permutation (the token of a pair is
// pair / K, T = ceil(R / K) tokens) and a routing weight per pair in [0.1, 1).
struct Routing {
  int E = 0, R = 0, T = 0;
  std::vector<int32_t> offsets, pairs;
  std::vector<float> top_w;
};
inline Routing random_routing(const std::vector<int>& counts, int K, std::mt19937& rng) {
  Routing g;
  g.E = static_cast<int>(counts.size());
  g.R = std::accumulate(counts.begin(), counts.end(), 0);
  g.T = (g.R + K - 1) / K;
  g.offsets.assign(static_cast<size_t>(g.E) + 1, 0);
  for (int e = 0; e < g.E; ++e) g.offsets[e + 1] = g.offsets[e] + counts[e];
  g.pairs.resize(static_cast<size_t>(g.R));
  std::iota(g.pairs.begin(), g.pairs.end(), 0);
  std::shuffle(g.pairs.begin(), g.pairs.end(), rng);
  g.top_w.resize(static_cast<size_t>(g.R));
  for (auto& w : g.top_w) w = std::uniform_real_distribution<float>(0.1f, 1.0f)(rng);
  return g;
}

// The routing kernel's tile list (moe/route_kernel.cuh, route_group_kernel): each expert's rows cut into
// tiles of tile_rows in expert order, then {-1, 0, 0, 0} up to max_tiles entries.
inline std::vector<int32_t> tile_list(const std::vector<int32_t>& offsets, int tile_rows, int64_t max_tiles) {
  std::vector<int32_t> t;
  for (size_t e = 0; e + 1 < offsets.size(); ++e)
    for (int32_t r = offsets[e]; r < offsets[e + 1]; r += tile_rows)
      t.insert(t.end(), {static_cast<int32_t>(e), r, std::min(tile_rows, offsets[e + 1] - r), 0});
  EXPECT_LE(static_cast<int64_t>(t.size()) / 4, max_tiles);
  while (static_cast<int64_t>(t.size()) < 4 * max_tiles) t.insert(t.end(), {-1, 0, 0, 0});
  return t;
}

}  // namespace dgemma::cuda::test
