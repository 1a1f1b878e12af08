#pragma once
// The reference rules of the denoising sampler's per-step decisions (docs/MODEL.md §6.2, §6.4), host side:
// the CPU backend's decide op is built from them and the CUDA kernel is checked against them. Pure
// functions of their inputs (the engine's own rules are in engine/denoise_policy.h).
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "guided/token_walk.h"

namespace dgemma {

// Entropy-bound acceptance: sort entropies ascending (stable), accept position k of the sorted order
// iff the fp32 sum of the entropies strictly before it is <= bound (computed as the reference does:
// cumsum[k] - sorted[k]). The lowest-entropy position is always accepted.
std::vector<uint8_t> entropy_bound_accept(std::span<const float> entropy, float bound);

// Mean of the entropies (fp32 sum in position order, / C) < threshold.
bool is_confident(std::span<const float> entropy, float threshold);

// The same rules on a canvas with pinned positions (pinned[p] != 0; docs/MODEL.md §6.6): pinned
// positions are accepted and take no part in the sort or the prefix sum, which run over the free
// positions alone (so the lowest-entropy *free* position is always accepted); the confidence mean is
// the fp32 sum of the free entropies in position order divided by their count (a canvas without free
// positions is confident). An empty mask is the unpinned rule above, bit for bit.
std::vector<uint8_t> entropy_bound_accept(std::span<const float> entropy, float bound, std::span<const uint8_t> pinned);
bool is_confident(std::span<const float> entropy, float threshold, std::span<const uint8_t> pinned);

// The flat view of a constraint's tables (their tensors' storage as the backend's kernels address it).
guided::TokenConstraintView guided_view(const GuidedTables& t);

// The guided rule of decide (backend.h GuidedGap) on host arrays: `chosen` is the step's chosen token
// per position (pinned positions hold their pinned token; `pinned`: the canvas's pin mask or null);
// positions of the gap after its longest kept prefix lose their acceptance (accept[p] = 0). Returns how
// many gap positions were kept.
int32_t guided_decide(const GuidedGap& gap, const int32_t* chosen, uint8_t* accept, const uint8_t* pinned);

// Validates a DecideArgs for a backend of `device` and returns C (throws naming the bad field).
int64_t check_decide_args(const DecideArgs& a, Device device);

// Largest canvas the decide op takes (the CUDA kernel sorts a canvas in one block's shared memory).
inline constexpr int64_t kMaxDecideCanvas = 8192;

}  // namespace dgemma
