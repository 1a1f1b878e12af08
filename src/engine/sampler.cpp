#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {

DiffusionParams resolve_diffusion_params(const GenerationConfig& g, std::optional<int> max_denoising_steps,
                                         std::optional<double> entropy_bound, std::optional<double> t_min,
                                         std::optional<double> t_max, std::optional<int> stability_threshold,
                                         std::optional<double> confidence_threshold) {
  GenerationConfig r = g;
  r.max_denoising_steps = max_denoising_steps.value_or(g.max_denoising_steps);
  r.entropy_bound = entropy_bound.value_or(g.entropy_bound);
  r.t_min = t_min.value_or(g.t_min);
  r.t_max = t_max.value_or(g.t_max);
  r.stability_threshold = stability_threshold.value_or(g.stability_threshold);
  r.confidence_threshold = confidence_threshold.value_or(g.confidence_threshold);
  r.validate();
  if (r.max_denoising_steps > 4096)
    throw Error(ErrorKind::kInvalidArgument, "max_denoising_steps must be at most 4096", "max_denoising_steps");
  DiffusionParams d;
  d.max_denoising_steps = r.max_denoising_steps;
  d.entropy_bound = r.entropy_bound;
  d.t_min = r.t_min;
  d.t_max = r.t_max;
  d.stability_threshold = r.stability_threshold;
  d.confidence_threshold = r.confidence_threshold;
  return d;
}

float temperature_at(const DiffusionParams& p, int step) {
  const int n = p.max_denoising_steps;
  const float frac = static_cast<float>(n - step) / static_cast<float>(n);
  const float span = static_cast<float>(p.t_max - p.t_min);
  const float scaled = span * frac;
  return static_cast<float>(p.t_min) + scaled;
}

std::vector<uint8_t> entropy_bound_accept(std::span<const float> entropy, double bound) {
  const size_t n = entropy.size();
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return entropy[a] < entropy[b]; });
  std::vector<uint8_t> accept(n, 0);
  float cum = 0.0f;  // fp32 prefix sum, as torch.cumsum
  const float fbound = static_cast<float>(bound);
  for (size_t k = 0; k < n; ++k) {
    const float h = entropy[order[k]];
    const float before = (cum + h) - h;  // the reference computes cumsum[k] - sorted[k]
    cum += h;
    accept[order[k]] = before <= fbound ? 1 : 0;
  }
  return accept;
}

std::vector<float> entropy_bound_margins(std::span<const float> entropy, double bound) {
  const size_t n = entropy.size();
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return entropy[a] < entropy[b]; });
  std::vector<float> margin(n);
  float cum = 0.0f;
  for (size_t k = 0; k < n; ++k) {
    margin[order[k]] = std::fabs(cum - static_cast<float>(bound));
    cum += entropy[order[k]];
  }
  return margin;
}

std::vector<int32_t> random_canvas(uint64_t seed, uint64_t canvas, uint64_t step, uint32_t purpose, int n, int vocab) {
  const uint64_t key = rng::stream_key(seed, canvas, step, purpose);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) out[p] = static_cast<int32_t>(rng::uniform_token(key, static_cast<uint32_t>(p), static_cast<uint32_t>(vocab)));
  return out;
}

bool StabilityTracker::update(std::span<const int32_t> argmax) {
  if (threshold_ == 0) return true;
  bool stable = static_cast<int>(history_.size()) == threshold_;
  for (const auto& h : history_) stable = stable && std::equal(h.begin(), h.end(), argmax.begin(), argmax.end());
  history_.emplace_back(argmax.begin(), argmax.end());
  if (static_cast<int>(history_.size()) > threshold_) history_.erase(history_.begin());
  return stable;
}

bool is_confident(std::span<const float> entropy, double threshold) {
  float sum = 0.0f;
  for (float h : entropy) sum += h;
  const float mean = entropy.empty() ? 0.0f : sum / static_cast<float>(entropy.size());
  return mean < static_cast<float>(threshold);
}

}  // namespace dgemma
