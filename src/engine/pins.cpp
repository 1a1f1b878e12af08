#include "engine/pins.h"

#include <algorithm>

#include "util/error.h"

namespace dgemma {

void validate_pins(std::span<const PinnedSpan> pins, int64_t max_tokens, int64_t vocab_size) {
  int64_t end = 0;
  for (size_t i = 0; i < pins.size(); ++i) {
    const PinnedSpan& s = pins[i];
    auto fail = [&](const std::string& why) {
      throw Error(ErrorKind::kInvalidArgument, fmt::format("pins[{}] (offset {}): {}", i, s.offset, why), "pins");
    };
    if (s.tokens.empty()) fail("a pinned span must hold at least one token");
    if (s.offset < 0) fail("the offset must not be negative");
    if (i > 0 && s.offset < end)
      fail(fmt::format("spans must be sorted by offset and must not overlap (the previous span ends at {})", end));
    if (s.offset > max_tokens || static_cast<int64_t>(s.tokens.size()) > max_tokens - s.offset)
      fail(fmt::format("the span ends at answer position {}, beyond max_tokens = {}",
                       s.offset + static_cast<int64_t>(s.tokens.size()), max_tokens));
    for (int32_t id : s.tokens)
      if (id < 0 || id >= vocab_size) fail(fmt::format("invalid token id {}", id));
    end = s.offset + static_cast<int64_t>(s.tokens.size());
  }
}

CanvasPins canvas_pins(std::span<const PinnedSpan> pins, int64_t canvas_index, int canvas_length) {
  CanvasPins out;
  const int64_t lo = canvas_index * canvas_length, hi = lo + canvas_length;
  for (const PinnedSpan& s : pins) {
    const int64_t b = std::max(lo, s.offset), e = std::min(hi, s.offset + static_cast<int64_t>(s.tokens.size()));
    if (b >= e) continue;
    if (out.mask.empty()) {
      out.mask.assign(static_cast<size_t>(canvas_length), 0);
      out.tokens.assign(static_cast<size_t>(canvas_length), 0);
    }
    for (int64_t a = b; a < e; ++a) {
      out.mask[static_cast<size_t>(a - lo)] = 1;
      out.tokens[static_cast<size_t>(a - lo)] = s.tokens[static_cast<size_t>(a - s.offset)];
    }
    const int rb = static_cast<int>(b - lo), re = static_cast<int>(e - lo);
    if (!out.runs.empty() && out.runs.back().second == rb)
      out.runs.back().second = re;  // adjacent spans form one run
    else
      out.runs.emplace_back(rb, re);
  }
  return out;
}

int64_t pins_end(std::span<const PinnedSpan> pins) {
  int64_t end = 0;
  for (const PinnedSpan& s : pins) end = std::max(end, s.offset + static_cast<int64_t>(s.tokens.size()));
  return end;
}

void apply_pins(const CanvasPins& pins, std::vector<int32_t>& canvas) {
  if (pins.empty()) return;
  DG_CHECK(canvas.size() == pins.mask.size());
  for (size_t p = 0; p < canvas.size(); ++p)
    if (pins.mask[p]) canvas[p] = pins.tokens[p];
}

}  // namespace dgemma
