#pragma once
// The golden fixtures (tests/fixtures/NAME) as the engine-level checks read them: the folder, an id
// array of golden/, and a manifest run's sampler settings as SequenceParams (traced).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/params.h"
#include "util/json.h"

namespace dgemma::gpu_test {

std::string fixture_dir(const std::string& name);
// golden/KEY.npy as token ids.
std::vector<int32_t> fixture_ids(const std::string& fixture, const std::string& key);
// One entry of golden/manifest.json's "runs": its steps, bounds, temperatures, seed and length, with
// the model's end-of-sequence ids and traces on (its initial canvas, if any, is the caller's).
SequenceParams fixture_run_params(const Json& run);

}  // namespace dgemma::gpu_test
