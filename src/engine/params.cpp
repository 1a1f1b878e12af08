#include "engine/params.h"

#include <algorithm>

#include "engine/guided_answer.h"
#include "engine/limits.h"
#include "engine/pins.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {

DiffusionParams resolve_diffusion_params(const SamplingParams& p, const GenerationConfig& g) {
  GenerationConfig r = g;
  r.max_denoising_steps = p.max_denoising_steps.value_or(g.max_denoising_steps);
  r.entropy_bound = p.entropy_bound.value_or(g.entropy_bound);
  r.t_min = p.t_min.value_or(g.t_min);
  r.t_max = p.t_max.value_or(g.t_max);
  r.stability_threshold = p.stability_threshold.value_or(g.stability_threshold);
  r.confidence_threshold = p.confidence_threshold.value_or(g.confidence_threshold);
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

SequenceParams resolve_sequence_params(const SamplingParams& p, const GenerationConfig& g, const ParamsContext& ctx) {
  SequenceParams s;
  s.diffusion = resolve_diffusion_params(p, g);
  // OpenAI temperature: unset or 1 keeps the checkpoint's schedule; T > 0 scales both ends of it;
  // T = 0 is greedy (the per-position sample is the argmax; entropies use the unscaled schedule).
  if (p.temperature) {
    const double t = *p.temperature;
    if (!(t >= limits::kMinTemperature) || t > limits::kMaxTemperature)
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("temperature must be in [{}, {}]", limits::kMinTemperature, limits::kMaxTemperature),
                  "temperature");
    if (t == 0) {
      s.greedy = true;
    } else if (t != 1) {
      s.diffusion.t_min *= t;
      s.diffusion.t_max *= t;
    }
  }
  s.stop_ids = p.stop_token_ids;
  s.seed = p.seed ? *p.seed : rng::splitmix64(ctx.engine_seed ^ rng::splitmix64(ctx.request_id));
  s.max_tokens = p.max_tokens;
  s.ignore_eos = p.ignore_eos;
  s.eos_ids = g.eos_token_ids;
  s.pad_id = g.pad_token_id;
  s.previews = p.previews;
  s.logprobs = p.logprobs;
  if (p.top_logprobs < 0 || p.top_logprobs > limits::kMaxTopLogprobs)
    throw Error(ErrorKind::kInvalidArgument, fmt::format("top_logprobs must be in [0, {}]", limits::kMaxTopLogprobs),
                "top_logprobs");
  if (ctx.vocab_size > 0 && p.top_logprobs > ctx.vocab_size)
    throw Error(ErrorKind::kInvalidArgument, fmt::format("top_logprobs must be at most the vocabulary size {}", ctx.vocab_size),
                "top_logprobs");
  if (p.top_logprobs > 0 && !p.logprobs)
    throw Error(ErrorKind::kInvalidArgument, "top_logprobs needs logprobs", "top_logprobs");
  s.top_logprobs = p.top_logprobs;
  if (p.top_k) {
    if (*p.top_k < -1) throw Error(ErrorKind::kInvalidArgument, "top_k must be -1, 0 (off) or at least 1", "top_k");
    s.filter.top_k = std::max(*p.top_k, 0);
  }
  if (p.top_p) {
    if (!(*p.top_p > 0 && *p.top_p <= 1)) throw Error(ErrorKind::kInvalidArgument, "top_p must be in (0, 1]", "top_p");
    s.filter.top_p = *p.top_p;
  }
  if (p.min_p) {
    if (!(*p.min_p >= 0 && *p.min_p <= 1)) throw Error(ErrorKind::kInvalidArgument, "min_p must be in [0, 1]", "min_p");
    s.filter.min_p = *p.min_p;
  }
  // Greedy takes the argmax, which every filter keeps: the filter would only cost time.
  if (s.greedy) s.filter = SampleFilter{};
  if (!p.canvas_ids.empty()) {
    const int C = ctx.canvas_length;
    if (static_cast<int>(p.canvas_ids.size()) != C)
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("canvas_ids must have exactly canvas_length = {} token ids (got {})", C, p.canvas_ids.size()),
                  "canvas_ids");
    for (int32_t id : p.canvas_ids)
      if (id < 0 || id >= ctx.vocab_size)
        throw Error(ErrorKind::kInvalidArgument, fmt::format("canvas_ids contains an invalid token id {}", id), "canvas_ids");
    s.initial_canvas = p.canvas_ids;
  }
  validate_pins(p.pins, p.max_tokens, ctx.vocab_size);
  s.pins = p.pins;
  if (p.guided) {
    validate_guided_answer(*p.guided, p.pins, p.max_tokens, ctx.vocab_size);
    s.guided = p.guided;
  }
  return s;
}

}  // namespace dgemma
