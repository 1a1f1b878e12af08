#pragma once
// The projections of a layer that read the same input, fused at load into one weight so that the
// forward runs one larger GEMM instead of two or three latency-bound small ones (docs/ARCHITECTURE.md
// "Fused projections"): q | k | v of the attention (K=V layers: q | k), gate | up of the dense MLP and
// of the self-conditioning MLP. Rows are concatenated in that order. That is exact in every
// WeightFormat (weight.h: the FP8 / NVFP4 row scales are per row, NVFP4's block scales per row and
// 16 inputs), so a pair is fused whenever its parts share the format and the activation handling;
// otherwise the parts stay separate. The fused weight replaces its parts (they are emptied).
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "backend/backend.h"
#include "backend/weight.h"

namespace dgemma {

struct LayerWeights;
struct ModelWeights;
struct WeightSpec;

enum class FusedGroup { kNone, kQkv, kGateUp, kScGateUp };

// The fused group a checkpoint tensor (expected_weights' name) is a part of, and its place in it.
struct FusedPart {
  FusedGroup group = FusedGroup::kNone;
  int index = 0;  // q 0, k 1, v 2; gate 0, up 1
};
FusedPart fused_part(const WeightSpec& spec);

// Rows [begin, end) of a weight in a host layout (the checkpoint's, which the CPU backend computes on):
// a view, every tensor of the format sliced alike.
Weight weight_rows(const Weight& w, int64_t begin, int64_t end);

// The parts' rows concatenated in order into new host tensors (2-D host weights), or nullopt when the
// parts differ in format, activation handling or input width (or one is empty).
std::optional<Weight> concat_rows(std::span<const Weight> parts);

// Completes a fused group once all its parts are read: parts still on the host (not uploaded) are
// concatenated and the result uploaded with backend.upload_weight into `fused`, the parts emptied; when
// they cannot be fused (or `fuse` is off: the loaders' fuse_projections) each part is uploaded on its
// own. A `fused` weight already built (its parts being views into it) just has its part views emptied.
// Absent parts (a K=V layer's v) are skipped.
void finish_fused(Backend& backend, Weight& fused, std::span<Weight* const> parts, bool fuse = true);

// The layer's groups (q | k | v, gate | up) and the self-conditioning MLP's gate | up, by finish_fused.
void finish_layer_fusion(Backend& backend, LayerWeights& layer, bool fuse = true);
void finish_sc_fusion(Backend& backend, ModelWeights& w, bool fuse = true);

}  // namespace dgemma
