#include "engine/guided_answer.h"

#include <algorithm>

#include "guided/token_constraint.h"
#include "util/error.h"

namespace dgemma {
namespace {

bool is_filler(const guided::TokenConstraint& c, int32_t id) {
  return id >= 0 && id < c.vocabulary().size() && c.vocabulary().kind(id) == guided::TokenKind::kFiller;
}

// True when no byte leads anywhere from `state` (a complete value that cannot grow).
bool closed(const guided::TokenConstraint& c, int32_t state) {
  const guided::Dfa& d = c.dfa();
  for (int32_t k = 0; k < d.num_classes; ++k)
    if (d.next[static_cast<size_t>(state) * static_cast<size_t>(d.num_classes) + static_cast<size_t>(k)] >= 0)
      return false;
  return true;
}

std::vector<int32_t> completion(const guided::TokenConstraint& c, int32_t state) {
  auto tokens = c.completion_tokens(state);
  if (!tokens) throw Error(ErrorKind::kInternal, "guided decoding: the vocabulary cannot spell a completion");
  return std::move(*tokens);
}

}  // namespace

void validate_guided_answer(const GuidedAnswer& g, std::span<const PinnedSpan> pins, int64_t max_tokens,
                            int64_t vocab_size) {
  auto fail = [](const std::string& why) { throw Error(ErrorKind::kInvalidArgument, why, "max_tokens"); };
  DG_CHECK(g.constraint != nullptr);
  const guided::TokenConstraint& c = *g.constraint;
  if (c.vocabulary().size() > vocab_size)
    throw Error(ErrorKind::kInvalidArgument, "guided decoding: the constraint's vocabulary is larger than the model's");
  if (g.begin < 0 || g.end < g.begin || g.end + static_cast<int64_t>(g.suffix.size()) > max_tokens)
    fail(fmt::format("the guided value's positions [{}, {}) and its {} closing tokens do not fit in max_tokens = {}",
                     g.begin, g.end, g.suffix.size(), max_tokens));
  // The pinned tokens from `begin` on, as the walk takes them.
  int32_t state = c.start();
  int64_t at = g.begin;
  for (const PinnedSpan& s : pins) {
    if (s.offset + static_cast<int64_t>(s.tokens.size()) <= at) continue;
    if (s.offset != at) break;
    for (int32_t t : s.tokens) {
      if (at >= g.end) break;
      state = c.step(state, t);
      if (state < 0) throw Error(ErrorKind::kInvalidArgument, "guided decoding: a pinned token breaks the value");
      ++at;
    }
  }
  const int64_t shortest = c.completion_length(state);
  if (shortest > g.end - at)
    fail(fmt::format("the shortest valid value takes up to {} more tokens, but only {} answer positions are left for it",
                     shortest, g.end - at));
}

GuidedSegment guided_segment(const GuidedAnswer& g, int64_t canvas_index, int canvas_length) {
  const int64_t base = canvas_index * canvas_length;
  const int64_t first = std::max(g.begin, base), last = std::min(g.end, base + canvas_length);
  GuidedSegment s;
  if (last <= first) return s;
  s.first = static_cast<int>(first - base);
  s.last = static_cast<int>(last - base);
  s.room = g.end - first;
  return s;
}

GuidedCommit guide_canvas(const GuidedAnswer& g, int64_t canvas_index, int32_t state, std::span<int32_t> canvas,
                          int32_t pad_id, std::span<const uint8_t> pinned) {
  const guided::TokenConstraint& c = *g.constraint;
  const int C = static_cast<int>(canvas.size());
  const int64_t base = canvas_index * C;
  GuidedCommit out;
  out.state = state;
  const GuidedSegment seg = guided_segment(g, canvas_index, C);
  if (seg.empty()) return out;
  const int len = seg.last - seg.first;
  const guided::TokenConstraintView v = c.view();
  const guided::WalkResult r =
      guided::walk_tokens_within(v, c.distances().data(), state, canvas.data() + seg.first, len, seg.room,
                                 pinned.empty() ? nullptr : pinned.data() + seg.first);
  // `at`: the position after the kept prefix's last text token (filler after it is dropped anyway, so
  // a completion may go there; the walk checked its room from there).
  int at = seg.first;
  bool ends_in_filler = false;  // the kept prefix ends in filler: the model ended the value there
  for (int p = seg.first; p < seg.first + r.accepted; ++p) {
    ends_in_filler = is_filler(c, canvas[static_cast<size_t>(p)]);
    if (ends_in_filler)
      canvas[static_cast<size_t>(p)] = pad_id;
    else
      at = p + 1;
  }
  int32_t st = r.state;
  const bool last_canvas = base + C >= g.end;
  const bool model_ended = ends_in_filler;
  const bool cannot_grow = c.accepting(st) && closed(c, st);
  std::vector<int32_t> tail = completion(c, st);
  const bool fits = static_cast<int>(tail.size()) <= seg.last - at;
  if (last_canvas || cannot_grow || (model_ended && fits)) {
    DG_CHECK(fits);  // the walk kept only prefixes whose completion fits in the region
    for (int32_t t : tail) {
      canvas[static_cast<size_t>(at++)] = t;
      st = c.step(st, t);
    }
    DG_CHECK(c.accepting(st));
    std::fill(canvas.begin() + at, canvas.begin() + seg.last, pad_id);
    out.state = st;
    out.done = true;
    out.value_end = base + at;
    return out;
  }
  // The value goes on in the next canvas: enough of the completion here that the rest fits after it
  // (free positions always suffice: each keeps the room rule; after pinned text, which is not held to
  // it, the pins of the next canvas carry the value on and the validation checked what follows them).
  const int64_t room_after = g.end - (base + C);
  for (size_t i = 0; i < tail.size() && at < seg.last && c.completion_length(st) > room_after; ++i) {
    canvas[static_cast<size_t>(at++)] = tail[i];
    st = c.step(st, tail[i]);
  }
  std::fill(canvas.begin() + at, canvas.begin() + seg.last, pad_id);
  out.state = st;
  return out;
}

}  // namespace dgemma
