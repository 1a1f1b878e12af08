// The one resolve of request parameters (engine/params.h): SamplingParams x GenerationConfig x the
// engine's seed -> SequenceParams, with every error naming its parameter.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "engine/params.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {
namespace {

GenerationConfig checkpoint() {
  GenerationConfig g;  // the released checkpoint's sampler settings
  g.max_denoising_steps = 48;
  g.entropy_bound = 0.1;
  g.t_min = 0.4;
  g.t_max = 0.8;
  g.stability_threshold = 1;
  g.confidence_threshold = 0.005;
  g.eos_token_ids = {1, 106};
  return g;
}

ParamsContext context(uint64_t request_id = 7) {
  ParamsContext c;
  c.engine_seed = 1234;
  c.request_id = request_id;
  c.canvas_length = 4;
  c.vocab_size = 100;
  return c;
}

std::string refused_param(const SamplingParams& p, const GenerationConfig& g = checkpoint()) {
  try {
    (void)resolve_sequence_params(p, g, context());
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    return e.param();
  }
  return "";
}

TEST(Params, UnsetFieldsTakeTheGenerationConfig) {
  SamplingParams p;
  p.max_tokens = 33;
  const SequenceParams s = resolve_sequence_params(p, checkpoint(), context());
  EXPECT_EQ(s.diffusion.max_denoising_steps, 48);
  EXPECT_DOUBLE_EQ(s.diffusion.entropy_bound, 0.1);
  EXPECT_DOUBLE_EQ(s.diffusion.t_min, 0.4);
  EXPECT_DOUBLE_EQ(s.diffusion.t_max, 0.8);
  EXPECT_EQ(s.diffusion.stability_threshold, 1);
  EXPECT_DOUBLE_EQ(s.diffusion.confidence_threshold, 0.005);
  EXPECT_EQ(s.max_tokens, 33);
  EXPECT_EQ(s.eos_ids, (std::vector<int32_t>{1, 106}));
  EXPECT_FALSE(s.greedy);
  EXPECT_TRUE(s.initial_canvas.empty());
}

TEST(Params, OverridesReplaceTheGenerationConfig) {
  SamplingParams p;
  p.max_denoising_steps = 5;
  p.entropy_bound = 0.5;
  p.t_min = 0.1;
  p.t_max = 0.2;
  p.stability_threshold = 3;
  p.confidence_threshold = 0.01;
  p.stop_token_ids = {9};
  p.ignore_eos = true;
  p.previews = true;
  p.logprobs = true;
  const SequenceParams s = resolve_sequence_params(p, checkpoint(), context());
  EXPECT_EQ(s.diffusion.max_denoising_steps, 5);
  EXPECT_DOUBLE_EQ(s.diffusion.entropy_bound, 0.5);
  EXPECT_DOUBLE_EQ(s.diffusion.t_min, 0.1);
  EXPECT_DOUBLE_EQ(s.diffusion.t_max, 0.2);
  EXPECT_EQ(s.diffusion.stability_threshold, 3);
  EXPECT_DOUBLE_EQ(s.diffusion.confidence_threshold, 0.01);
  EXPECT_EQ(s.stop_ids, (std::vector<int32_t>{9}));
  EXPECT_TRUE(s.ignore_eos);
  EXPECT_TRUE(s.previews);
  EXPECT_TRUE(s.logprobs);
}

TEST(Params, TemperatureScalesTheScheduleAndZeroIsGreedy) {
  SamplingParams p;
  p.temperature = 1.5;
  SequenceParams s = resolve_sequence_params(p, checkpoint(), context());
  EXPECT_DOUBLE_EQ(s.diffusion.t_min, 0.4 * 1.5);
  EXPECT_DOUBLE_EQ(s.diffusion.t_max, 0.8 * 1.5);
  EXPECT_FALSE(s.greedy);
  p.temperature = 1.0;
  s = resolve_sequence_params(p, checkpoint(), context());
  EXPECT_DOUBLE_EQ(s.diffusion.t_max, 0.8);
  p.temperature = 0.0;
  s = resolve_sequence_params(p, checkpoint(), context());
  EXPECT_TRUE(s.greedy);
  EXPECT_DOUBLE_EQ(s.diffusion.t_max, 0.8) << "greedy keeps the unscaled schedule for the entropies";
}

TEST(Params, SeedIsTheRequestsOrDerivedFromTheEngineSeedAndId) {
  SamplingParams p;
  p.seed = 42;
  EXPECT_EQ(resolve_sequence_params(p, checkpoint(), context()).seed, 42u);
  p.seed.reset();
  const uint64_t derived = resolve_sequence_params(p, checkpoint(), context(7)).seed;
  EXPECT_EQ(derived, rng::splitmix64(1234 ^ rng::splitmix64(7)));
  EXPECT_NE(derived, resolve_sequence_params(p, checkpoint(), context(8)).seed);
}

TEST(Params, CanvasIdsMustBeOneCanvasOfValidIds) {
  SamplingParams p;
  p.canvas_ids = {1, 2, 3, 4};
  EXPECT_EQ(resolve_sequence_params(p, checkpoint(), context()).initial_canvas, p.canvas_ids);
  p.canvas_ids = {1, 2, 3};
  EXPECT_EQ(refused_param(p), "canvas_ids");
  p.canvas_ids = {1, 2, 3, 100};
  EXPECT_EQ(refused_param(p), "canvas_ids");
  p.canvas_ids = {1, -2, 3, 4};
  EXPECT_EQ(refused_param(p), "canvas_ids");
}

TEST(Params, BadValuesNameTheirParameter) {
  auto with = [](auto set) {
    SamplingParams p;
    set(p);
    return refused_param(p);
  };
  EXPECT_EQ(with([](SamplingParams& p) { p.max_denoising_steps = 0; }), "max_denoising_steps");
  EXPECT_EQ(with([](SamplingParams& p) { p.entropy_bound = 0; }), "entropy_bound");
  EXPECT_EQ(with([](SamplingParams& p) { p.t_min = 0.9; }), "t_max") << "t_max must exceed t_min";
  EXPECT_EQ(with([](SamplingParams& p) { p.t_min = -1; }), "t_min");
  EXPECT_EQ(with([](SamplingParams& p) { p.stability_threshold = -1; }), "stability_threshold");
  EXPECT_EQ(with([](SamplingParams& p) { p.confidence_threshold = 0; }), "confidence_threshold");
  EXPECT_EQ(with([](SamplingParams& p) { p.temperature = -0.5; }), "temperature");
  EXPECT_EQ(with([](SamplingParams& p) { p.temperature = std::nan(""); }), "temperature");
}

TEST(Params, SampleFiltersAndTopLogprobsAreCarriedAndChecked) {
  SamplingParams p;
  EXPECT_FALSE(resolve_sequence_params(p, checkpoint(), context()).filter.active()) << "off by default";
  p.top_k = 40;
  p.top_p = 0.9;
  p.min_p = 0.05;
  p.logprobs = true;
  p.top_logprobs = 20;
  SequenceParams s = resolve_sequence_params(p, checkpoint(), context());
  EXPECT_EQ(s.filter.top_k, 40);
  EXPECT_EQ(s.filter.top_p, 0.9);
  EXPECT_EQ(s.filter.min_p, 0.05);
  EXPECT_EQ(s.top_logprobs, 20);
  p.top_k = -1;  // vLLM's "off"
  EXPECT_EQ(resolve_sequence_params(p, checkpoint(), context()).filter.top_k, 0);
  p.temperature = 0;
  EXPECT_FALSE(resolve_sequence_params(p, checkpoint(), context()).filter.active())
      << "greedy takes the argmax, which every filter keeps";
  auto with = [](auto set) {
    SamplingParams q;
    set(q);
    return refused_param(q);
  };
  EXPECT_EQ(with([](SamplingParams& q) { q.top_k = -2; }), "top_k");
  EXPECT_EQ(with([](SamplingParams& q) { q.top_p = 0; }), "top_p");
  EXPECT_EQ(with([](SamplingParams& q) { q.top_p = 1.5; }), "top_p");
  EXPECT_EQ(with([](SamplingParams& q) { q.min_p = std::nan(""); }), "min_p");
  EXPECT_EQ(with([](SamplingParams& q) { q.top_logprobs = 3; }), "top_logprobs") << "needs logprobs";
  EXPECT_EQ(with([](SamplingParams& q) {
              q.logprobs = true;
              q.top_logprobs = 21;
            }),
            "top_logprobs");
  SamplingParams small;
  small.logprobs = true;
  small.top_logprobs = 20;
  ParamsContext tiny = context();
  tiny.vocab_size = 10;
  EXPECT_THROW((void)resolve_sequence_params(small, checkpoint(), tiny), Error) << "more alternatives than tokens";
}

TEST(Params, AGenerationConfigOutsideTheLimitsIsRefused) {
  // The engine factory resolves the bare generation config at start with this function.
  GenerationConfig g = checkpoint();
  g.max_denoising_steps = 5000;
  EXPECT_EQ(refused_param(SamplingParams{}, g), "max_denoising_steps");
  g = checkpoint();
  g.stability_threshold = 1000;
  EXPECT_EQ(refused_param(SamplingParams{}, g), "stability_threshold");
  EXPECT_EQ(refused_param(SamplingParams{}), "");
}

}  // namespace
}  // namespace dgemma
