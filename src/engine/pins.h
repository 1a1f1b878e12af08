#pragma once
// Pinned spans (docs/MODEL.md §6.6, docs/API.md "Pinned spans"): answer positions whose tokens are
// given. Validation of a request's spans, and the per-canvas view the runner and decide work with.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace dgemma {

// The pinned positions of one canvas.
struct CanvasPins {
  std::vector<uint8_t> mask;              // [C] 1 = pinned; empty when the canvas has no pinned position
  std::vector<int32_t> tokens;            // [C] the pinned token at pinned positions, 0 elsewhere
  std::vector<std::pair<int, int>> runs;  // [begin, end) canvas positions of each pinned run, ascending
  bool empty() const { return runs.empty(); }
  bool pinned(int p) const { return !mask.empty() && mask[static_cast<size_t>(p)] != 0; }
};

// Throws Error(kInvalidArgument, ..., "pins") unless every span is non-empty, starts at offset >= 0,
// follows the previous one without overlapping it, ends at or before max_tokens, and holds ids in
// [0, vocab_size).
void validate_pins(std::span<const PinnedSpan> pins, int64_t max_tokens, int64_t vocab_size);

// The pins of canvas `canvas_index` (answer positions [canvas_index * C, (canvas_index + 1) * C)).
CanvasPins canvas_pins(std::span<const PinnedSpan> pins, int64_t canvas_index, int canvas_length);

// The answer position just after the last pinned one (0 without pins).
int64_t pins_end(std::span<const PinnedSpan> pins);

// Writes the pinned tokens over `canvas` ([C]).
void apply_pins(const CanvasPins& pins, std::vector<int32_t>& canvas);

}  // namespace dgemma
