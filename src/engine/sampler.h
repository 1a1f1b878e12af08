#pragma once
// The entropy-bound sampler's host-side settings (MODEL.md §6.2, §6.4): per-request parameters, the
// temperature schedule and the stability run of the stop rule. The per-position maths over the
// vocabulary is the backend's sampler op; acceptance, renoising and the per-step flags are its decide
// op (rules in backend/decide_rules.h).
#include <cstdint>
#include <optional>

#include "backend/decide_rules.h"
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

// The stop rule's stability half, from one flag per step (decide's flags[0]: this step's argmax
// canvas equals the previous step's). Stable when the argmax equals each of the previous `threshold`
// argmax canvases — by transitivity, when the last `threshold` steps each repeated their predecessor.
// Never on a canvas's first step (the reference's history starts empty); threshold 0: always stable.
class StabilityRun {
 public:
  explicit StabilityRun(int threshold = 1) : threshold_(threshold) {}
  bool update(bool same_as_previous) {
    run_ = same_as_previous ? run_ + 1 : 0;
    return run_ >= threshold_;
  }

 private:
  int threshold_;
  int run_ = 0;
};

}  // namespace dgemma
