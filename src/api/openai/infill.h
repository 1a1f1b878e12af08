#pragma once
// Infilling on /v1/completions (docs/API.md "Infilling"): OpenAI's `suffix` and dgemma's
// `infill_template`, laid out as pinned spans of the answer (engine/request.h PinnedSpan), and the
// view of a choice's output that the response needs (the inserted text only, or each hole's text).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"

namespace dgemma {

struct InfillRequest {
  std::string suffix;  // OpenAI `suffix` ("": none)
  struct Piece {
    bool hole = false;
    std::string text;        // a fixed piece: pinned
    int64_t max_tokens = 0;  // a hole: its room
  };
  std::vector<Piece> pieces;  // `infill_template`
  bool active() const { return !suffix.empty() || !pieces.empty(); }
};

// One prompt's answer layout.
struct InfillLayout {
  std::vector<PinnedSpan> pins;
  int64_t max_tokens = 0;  // the answer's length in positions: the engine's max_tokens
  bool hide_pinned = false;  // `suffix`: the response holds the inserted text only
  std::vector<int64_t> hole_pins_before;  // `infill_template`: per hole, the answer's pinned tokens before it
};

// `max_tokens` is what the request would get without infilling (the client's cap or the default);
// `room` the context left after the prompt. Throws Error(kInvalidArgument, ..., param) naming `suffix`,
// `infill_template` or `max_tokens`.
InfillLayout layout_infill(const InfillRequest& r, const std::function<std::vector<int32_t>(std::string_view)>& tokenize,
                           int canvas_length, int64_t max_tokens, int64_t room, bool client_max_tokens);

// Turns a choice's committed tokens (with the engine's per-token pinned flags) into what the response
// text is made of, and collects each hole's tokens.
class PinnedOutput {
 public:
  explicit PinnedOutput(const InfillLayout& layout);
  // Returns the tokens (and log-probabilities, when given) the text is made of.
  // The per-token alternatives (top_n per token, when given) are kept aligned with the tokens.
  void feed(std::vector<int32_t>& tokens, std::vector<float>& logprobs, const std::vector<uint8_t>& pinned,
            int top_n = 0, std::vector<int32_t>* top_ids = nullptr, std::vector<float>* top_logprobs = nullptr);
  const std::vector<std::vector<int32_t>>& holes() const { return holes_; }
  bool has_holes() const { return !hole_pins_before_.empty(); }

 private:
  bool hide_;
  std::vector<int64_t> hole_pins_before_;
  std::vector<std::vector<int32_t>> holes_;
  int64_t pinned_seen_ = 0;
};

}  // namespace dgemma
