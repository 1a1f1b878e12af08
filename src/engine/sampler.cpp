#include "engine/sampler.h"


namespace dgemma {

float temperature_at(const DiffusionParams& p, int step) {
  const int n = p.max_denoising_steps;
  const float frac = static_cast<float>(n - step) / static_cast<float>(n);
  const float span = static_cast<float>(p.t_max - p.t_min);
  const float scaled = span * frac;
  return static_cast<float>(p.t_min) + scaled;
}

}  // namespace dgemma
