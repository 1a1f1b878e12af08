#include "engine/sampler.h"

#include "engine/limits.h"
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
  auto over = [](const char* param, auto value, auto limit) {
    if (value > limit)
      throw Error(ErrorKind::kInvalidArgument, fmt::format("{} must be at most {} (got {})", param, limit, value), param);
  };
  over("max_denoising_steps", r.max_denoising_steps, limits::kMaxDenoisingSteps);
  over("entropy_bound", r.entropy_bound, limits::kMaxEntropyBound);
  over("t_min", r.t_min, limits::kMaxScheduleTemperature);
  over("t_max", r.t_max, limits::kMaxScheduleTemperature);
  over("stability_threshold", r.stability_threshold, limits::kMaxStabilityThreshold);
  over("confidence_threshold", r.confidence_threshold, limits::kMaxConfidenceThreshold);
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

}  // namespace dgemma
