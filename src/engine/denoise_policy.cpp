#include "engine/denoise_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/counter_rng.h"


namespace dgemma {

std::vector<int32_t> random_canvas(uint64_t seed, uint64_t canvas, uint64_t step, uint32_t purpose, int n, int vocab) {
  const uint64_t key = rng::stream_key(seed, canvas, step, purpose);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) out[p] = static_cast<int32_t>(rng::uniform_token(key, static_cast<uint32_t>(p), static_cast<uint32_t>(vocab)));
  return out;
}

std::vector<float> entropy_bound_margins(std::span<const float> entropy, float bound) {
  // The same stable ascending order as entropy_bound_accept, so each margin belongs to its decision.
  std::vector<int> order(entropy.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return entropy[a] < entropy[b]; });
  std::vector<float> margin(entropy.size());
  float cum = 0.0f;
  for (int p : order) {
    margin[p] = std::fabs(cum - bound);
    cum += entropy[p];
  }
  return margin;
}

std::vector<float> entropy_bound_margins(std::span<const float> entropy, float bound, std::span<const uint8_t> pinned) {
  if (pinned.empty()) return entropy_bound_margins(entropy, bound);
  std::vector<float> free_h;
  for (size_t p = 0; p < entropy.size(); ++p)
    if (!pinned[p]) free_h.push_back(entropy[p]);
  const std::vector<float> free_margin = entropy_bound_margins(free_h, bound);
  std::vector<float> margin(entropy.size(), INFINITY);
  size_t k = 0;
  for (size_t p = 0; p < entropy.size(); ++p)
    if (!pinned[p]) margin[p] = free_margin[k++];
  return margin;
}

float temperature_at(const DiffusionParams& p, int step) {
  const int n = p.max_denoising_steps;
  const float frac = static_cast<float>(n - step) / static_cast<float>(n);
  const float span = static_cast<float>(p.t_max - p.t_min);
  const float scaled = span * frac;
  return static_cast<float>(p.t_min) + scaled;
}

}  // namespace dgemma
