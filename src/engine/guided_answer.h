#pragma once
// Guided decoding of an answer (engine/request.h GuidedAnswer; docs/API.md "Guided decoding on the
// canvas"): the validation of a request's region, the gap each canvas gives the sampler and decide
// ops, and the rule that closes a committed canvas's part of the value. The decide op renoises the
// positions after a gap's longest valid prefix at every step; the committed canvas (the last step's
// argmax) goes through guide_canvas, which makes it valid whatever the step chose.
#include <cstdint>
#include <span>

#include "engine/request.h"

namespace dgemma {

// Throws Error(kInvalidArgument, ..., "max_tokens") unless 0 <= begin <= end, end + suffix <= max_tokens,
// the constraint's vocabulary is at most `vocab_size` ids (the rest are never allowed), the pinned
// tokens from `begin` on (the value's fixed opening) are a valid start, and the shortest completion
// after them fits in the rest of [begin, end) (one token per byte: every byte has a piece).
void validate_guided_answer(const GuidedAnswer& g, std::span<const PinnedSpan> pins, int64_t max_tokens,
                            int64_t vocab_size);

// The region's positions in canvas `canvas_index` ([first, last) canvas positions, empty when none).
struct GuidedSegment {
  int first = 0, last = 0;
  int64_t room = 0;  // region positions from `first` on (to the region's end)
  bool empty() const { return last <= first; }
};
GuidedSegment guided_segment(const GuidedAnswer& g, int64_t canvas_index, int canvas_length);

// What guide_canvas did to a committed canvas.
struct GuidedCommit {
  int32_t state = 0;      // the automaton state after the canvas's part of the value
  bool done = false;      // the value is complete: the answer ends at value_end
  int64_t value_end = 0;  // answer position after the value's last token (done only)
};

// The committed canvas `canvas` (pinned tokens laid on; `pinned`: its pin mask, may be empty) of canvas `canvas_index`, its part of the value
// starting in `state`: the longest prefix of the segment that the automaton accepts and whose shortest
// completion fits in the room after it is kept; filler in it becomes pad_id. Then, after the prefix's
// last text token:
//  - the value closes here (its shortest completion written after the prefix, the rest pad) when this
//    is the region's last canvas, when the kept prefix ends in filler (the model ended the value: pad
//    or end-of-sequence after its text, whatever follows) and the completion fits, or when the value
//    can go no further;
//  - otherwise the rest of the segment becomes pad, and as many tokens of the shortest completion as
//    the room of the later canvases needs are written after the prefix: the next canvas continues
//    from the returned state.
// Throws Error(kInternal) when the vocabulary cannot spell a completion (validate_guided_answer's
// premise).
GuidedCommit guide_canvas(const GuidedAnswer& g, int64_t canvas_index, int32_t state, std::span<int32_t> canvas,
                          int32_t pad_id, std::span<const uint8_t> pinned = {});

}  // namespace dgemma
