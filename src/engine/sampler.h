#pragma once
// The entropy-bound sampler's decisions (MODEL.md §6.2, §6.4), host side: the temperature schedule,
// the acceptance mask, renoising with the counter-based RNG, and the stable-and-confident stop rule.
// The per-position maths over the vocabulary (soft-cap, entropy, argmax, Gumbel sample) is the
// backend's sampler op.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/config.h"

namespace dgemma {

// Resolved per-request sampler settings.
struct DiffusionParams {
  int max_denoising_steps = 48;
  double entropy_bound = 0.1;
  double t_min = 0.4;
  double t_max = 0.8;
  int stability_threshold = 1;
  double confidence_threshold = 0.005;
};

// Request overrides (unset: the model's generation config), validated with the reference's rules;
// throws Error(kInvalidArgument) naming the parameter.
DiffusionParams resolve_diffusion_params(const GenerationConfig& g, std::optional<int> max_denoising_steps,
                                         std::optional<double> entropy_bound, std::optional<double> t_min,
                                         std::optional<double> t_max, std::optional<int> stability_threshold,
                                         std::optional<double> confidence_threshold);

// T at executed step `step` (0-based) of a canvas: t_min + (t_max - t_min) * (N - step) / N, in fp32
// exactly as the reference's LinearTemperatureScheduleLogitsProcessor computes it.
float temperature_at(const DiffusionParams& p, int step);

// Entropy-bound acceptance: sort entropies ascending, accept position k of the sorted order iff the
// (fp32) sum of the entropies strictly before it is <= bound. The lowest-entropy position is always
// accepted.
std::vector<uint8_t> entropy_bound_accept(std::span<const float> entropy, double bound);

// Per position: |sum of the entropies sorted before it - bound| (how close its accept decision was).
std::vector<float> entropy_bound_margins(std::span<const float> entropy, double bound);

// Uniform random canvas of `n` tokens for (seed, canvas, step, purpose).
std::vector<int32_t> random_canvas(uint64_t seed, uint64_t canvas, uint64_t step, uint32_t purpose, int n, int vocab);

// Tracks the last `threshold` argmax canvases of one canvas's denoising (reset per canvas).
class StabilityTracker {
 public:
  explicit StabilityTracker(int threshold = 1) : threshold_(threshold) {}
  void reset() { history_.clear(); }
  // True when `argmax` equals each of the previous `threshold` argmax canvases (never on the first
  // step, as the reference's history starts at -1); then records it.
  bool update(std::span<const int32_t> argmax);

 private:
  int threshold_;
  std::vector<std::vector<int32_t>> history_;
};

// Mean of the entropies (fp32 sum, as torch.mean) < threshold.
bool is_confident(std::span<const float> entropy, double threshold);

}  // namespace dgemma
