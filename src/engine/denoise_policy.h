#pragma once
// The denoising policy on the host (docs/MODEL.md §6.2, §6.4): the initial canvas, the temperature schedule,
// the stability run of the stop rule, and the acceptance margins traces record. The per-position maths
// over the vocabulary is the backend's sampler op; acceptance, renoising and the per-step flags are its
// decide op (rules in backend/decide_rules.h).
#include <cstdint>
#include <span>
#include <vector>

#include "engine/params.h"

namespace dgemma {

// Uniform random canvas of `n` tokens for (seed, canvas, step, purpose).
std::vector<int32_t> random_canvas(uint64_t seed, uint64_t canvas, uint64_t step, uint32_t purpose, int n, int vocab);

// Per position: |sum of the entropies sorted before it - bound| (how close its accept decision was;
// traces only — the decision itself is backend/decide_rules.h entropy_bound_accept).
std::vector<float> entropy_bound_margins(std::span<const float> entropy, float bound);
// The same under the pinned rule (docs/MODEL.md §6.6): over the free positions only; a pinned
// position's margin is +infinity (its decision is never close).
std::vector<float> entropy_bound_margins(std::span<const float> entropy, float bound, std::span<const uint8_t> pinned);

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
    run_ = next_run(same_as_previous);
    return run_ >= threshold_;
  }
  // What update would return, without counting the step.
  bool stable_after(bool same_as_previous) const { return next_run(same_as_previous) >= threshold_; }

 private:
  int next_run(bool same_as_previous) const { return same_as_previous ? run_ + 1 : 0; }

  int threshold_;
  int run_ = 0;
};

}  // namespace dgemma
