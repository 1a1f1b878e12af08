#pragma once
// The one resolve-and-validate of a request's parameters: SamplingParams (what the client asked for) x
// GenerationConfig (the checkpoint's defaults) x the engine's seed -> SequenceParams (what a sequence
// runs with). Every bound is engine/limits.h's; the API checks the same bounds earlier for its own errors.
#include <cstdint>
#include <vector>

#include "backend/sample_filter.h"
#include "engine/request.h"
#include "model/config.h"

namespace dgemma {

// Resolved per-request sampler settings (docs/MODEL.md §6.2, §6.4).
struct DiffusionParams {
  int max_denoising_steps = 48;
  double entropy_bound = 0.1;
  double t_min = 0.4;
  double t_max = 0.8;
  int stability_threshold = 1;
  double confidence_threshold = 0.005;
};

struct SequenceParams {
  DiffusionParams diffusion;
  uint64_t seed = 0;
  int64_t max_tokens = 256;
  bool ignore_eos = false;
  std::vector<int32_t> eos_ids;
  std::vector<int32_t> stop_ids;        // extra stop ids (vLLM stop_token_ids): honoured even with ignore_eos
  bool greedy = false;                  // temperature 0: the per-position sample is the argmax
  std::vector<int32_t> initial_canvas;  // first canvas (empty: random)
  std::vector<PinnedSpan> pins;         // validated: in bounds, sorted, non-overlapping, ids < vocab
  int32_t pad_id = 0;                   // with pins: a filler token of a gap (sequence.h commit)
  std::shared_ptr<const GuidedAnswer> guided;  // validated: inside max_tokens, room for the shortest value
  bool previews = false;
  bool logprobs = false;
  int top_logprobs = 0;                 // alternatives per committed token (needs logprobs)
  SampleFilter filter;                  // support of the per-position sample (off when greedy)
  bool trace = false;                   // keep per-step records (tests, --dump)
};

// What the resolve needs to know of the engine and its model.
struct ParamsContext {
  uint64_t engine_seed = 0;  // --seed: requests without their own seed derive theirs from it and their id
  uint64_t request_id = 0;
  int canvas_length = 0;     // canvas_ids must have exactly this many ids
  int64_t vocab_size = 0;    // canvas_ids must lie in [0, vocab_size)
};

// Throws Error(kInvalidArgument) naming the offending parameter. Does not check the prompt or
// max_tokens against the context length (the engine's submit does, knowing max_model_len).
SequenceParams resolve_sequence_params(const SamplingParams& p, const GenerationConfig& g, const ParamsContext& ctx);

// The sampler half alone: request overrides (unset: the generation config's values), validated with the
// reference's rules and the limits. The engine factory runs it on the bare generation config at start so
// that a checkpoint outside the limits fails there, not on every request.
DiffusionParams resolve_diffusion_params(const SamplingParams& p, const GenerationConfig& g);

}  // namespace dgemma
