#include "gpu_check_fixtures.h"

#include "util/npy.h"

namespace dgemma::gpu_test {

std::string fixture_dir(const std::string& name) { return std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/" + name; }

std::vector<int32_t> fixture_ids(const std::string& fixture, const std::string& key) {
  std::vector<int32_t> out;
  for (int64_t v : read_npy(fixture_dir(fixture) + "/golden/" + key + ".npy").as_int()) out.push_back(static_cast<int32_t>(v));
  return out;
}

SequenceParams fixture_run_params(const Json& m) {
  SequenceParams p;
  p.diffusion.max_denoising_steps = m["max_denoising_steps"].get<int>();
  p.diffusion.entropy_bound = m["entropy_bound"].get<double>();
  p.diffusion.t_min = m["t_min"].get<double>();
  p.diffusion.t_max = m["t_max"].get<double>();
  p.diffusion.stability_threshold = m["stability_threshold"].get<int>();
  p.diffusion.confidence_threshold = m["confidence_threshold"].get<double>();
  p.seed = m["seed"].get<uint64_t>();
  p.max_tokens = m["max_new_tokens"].get<int64_t>();
  p.eos_ids = {1, 106, 50};
  p.trace = true;
  return p;
}

}  // namespace dgemma::gpu_test
