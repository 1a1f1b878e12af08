#include "api/openai/infill.h"

#include <algorithm>

#include "api/api_error.h"

namespace dgemma {

InfillLayout layout_infill(const InfillRequest& r, const std::function<std::vector<int32_t>(std::string_view)>& tokenize,
                           int canvas_length, int64_t max_tokens, int64_t room, bool client_max_tokens) {
  InfillLayout out;
  if (!r.suffix.empty()) {
    // The gap and the suffix share the first canvas, so the model sees the suffix while it fills the
    // gap: the suffix is pinned right after the gap's room, which is max_tokens capped at C - |suffix|.
    std::vector<int32_t> s = tokenize(r.suffix);
    const int64_t S = static_cast<int64_t>(s.size());
    if (S >= canvas_length)
      fail_param("suffix", "'suffix' is {} tokens; infilling needs it shorter than the canvas ({} tokens)", S, canvas_length);
    const int64_t gap = std::min({max_tokens, static_cast<int64_t>(canvas_length) - S, room - S});
    if (gap < 1)
      fail_param("suffix", "the prompt and the {}-token suffix leave no room for the gap in the context", S);
    out.pins.push_back({gap, std::move(s)});
    out.max_tokens = gap + S;
    out.hide_pinned = true;
    return out;
  }
  int64_t pos = 0, pinned = 0;
  for (const InfillRequest::Piece& p : r.pieces) {
    if (p.hole) {
      out.hole_pins_before.push_back(pinned);
      pos += p.max_tokens;
    } else {
      std::vector<int32_t> t = tokenize(p.text);
      const int64_t n = static_cast<int64_t>(t.size());
      out.pins.push_back({pos, std::move(t)});
      pos += n;
      pinned += n;
    }
    if (pos > room)
      fail_param("infill_template", "the infill template needs {} or more answer positions; the context leaves {}", pos, room);
  }
  if (client_max_tokens && max_tokens < pos)
    fail_param("max_tokens", "'max_tokens' ({}) is shorter than the infill template ({} positions)", max_tokens, pos);
  out.max_tokens = pos;
  return out;
}

PinnedOutput::PinnedOutput(const InfillLayout& layout)
    : hide_(layout.hide_pinned), hole_pins_before_(layout.hole_pins_before), holes_(layout.hole_pins_before.size()) {}

void PinnedOutput::feed(std::vector<int32_t>& tokens, std::vector<float>& logprobs, const std::vector<uint8_t>& pinned,
                        int top_n, std::vector<int32_t>* top_ids, std::vector<float>* top_logprobs) {
  const size_t n = static_cast<size_t>(top_n > 0 ? top_n : 0);
  const bool tops = n > 0 && top_ids != nullptr && top_logprobs != nullptr && top_ids->size() == n * tokens.size() &&
                    top_logprobs->size() == n * tokens.size();
  if (pinned.size() != tokens.size()) return;  // a request without pins
  size_t kept = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (pinned[i]) {
      ++pinned_seen_;
    } else if (!hole_pins_before_.empty()) {
      // Holes are separated by non-empty fixed pieces, so the pinned tokens seen so far name the hole
      // (an empty hole simply has no tokens).
      auto it = std::find(hole_pins_before_.begin(), hole_pins_before_.end(), pinned_seen_);
      if (it != hole_pins_before_.end()) holes_[static_cast<size_t>(it - hole_pins_before_.begin())].push_back(tokens[i]);
    }
    if (hide_ && pinned[i]) continue;
    tokens[kept] = tokens[i];
    if (!logprobs.empty()) logprobs[kept] = logprobs[i];
    if (tops)
      for (size_t k = 0; k < n; ++k) {
        (*top_ids)[kept * n + k] = (*top_ids)[i * n + k];
        (*top_logprobs)[kept * n + k] = (*top_logprobs)[i * n + k];
      }
    ++kept;
  }
  tokens.resize(kept);
  if (!logprobs.empty()) logprobs.resize(kept);
  if (tops) {
    top_ids->resize(kept * n);
    top_logprobs->resize(kept * n);
  }
}

}  // namespace dgemma
