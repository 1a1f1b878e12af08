#pragma once
// The golden fixtures (tests/fixtures/NAME) as the engine-level checks read them: the folder, an id
// array of golden/, a manifest run's sampler settings as SequenceParams (traced), a guided answer over
// the fixture model's ids, and the model's shape with head dims CUDA graphs can record.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/params.h"
#include "model/config.h"
#include "guided/guided.h"
#include "util/json.h"

namespace dgemma::gpu_test {

std::string fixture_dir(const std::string& name);
// The fixture model's config with the head dims the recordable attention takes (64 sliding, 128 full),
// for checks of CUDA graph recording on dummy weights.
ModelConfig recordable_config(const std::string& fixture);
// golden/KEY.npy as token ids.
std::vector<int32_t> fixture_ids(const std::string& fixture, const std::string& key);
// One entry of golden/manifest.json's "runs": its steps, bounds, temperatures, seed and length, with
// the model's end-of-sequence ids and traces on (its initial canvas, if any, is the caller's).
SequenceParams fixture_run_params(const Json& run);
// A guided answer (docs/API.md "Guided decoding on the canvas") of `spec` over all of p.max_tokens,
// lifted to a made-up vocabulary of `vocab_size` ids: p's pad and end-of-sequence ids are filler, id 2
// is never allowed, the rest are pieces of one to three characters of JSON text (every character has a
// piece of its own, so every completion can be spelt). Validated as a request's would be.
std::shared_ptr<const GuidedAnswer> fixture_guided_answer(int vocab_size, const SequenceParams& p,
                                                          const guided::ConstraintSpec& spec);

}  // namespace dgemma::gpu_test
