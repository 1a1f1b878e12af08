#include "text/parsers/reasoning_parser.h"

#include "text/parsers/markup_scan.h"
#include "util/error.h"

namespace dgemma {

using markup::Match;

ReasoningParser::ReasoningParser(bool thinking_enabled, bool starts_in_reasoning)
    : thinking_enabled_(thinking_enabled), starts_in_reasoning_(starts_in_reasoning) {}

ReasoningDelta ReasoningParser::feed(std::string_view text) {
  DG_CHECK(!finished_);
  buf_.append(text);
  ReasoningDelta out;
  run(out, false);
  return out;
}

ReasoningDelta ReasoningParser::finish() {
  DG_CHECK(!finished_);
  finished_ = true;
  ReasoningDelta out;
  run(out, true);
  DG_CHECK(pos_ == buf_.size());
  return out;
}

void ReasoningParser::run(ReasoningDelta& out, bool final) {
  while (step(out, final)) {
  }
  buf_.erase(0, pos_);  // what is held back is short: a partial marker, whitespace, a UTF-8 tail
  pos_ = 0;
}

bool ReasoningParser::step(ReasoningDelta& out, bool final) {
  const std::string_view b = buf_;
  const size_t n = b.size();
  const auto emit = [&](std::string& to, size_t end) {
    to.append(b.substr(pos_, end - pos_));
    pos_ = end;
  };
  const auto emit_rest = [&](std::string& to) {
    emit(to, final ? n : n - markup::utf8_incomplete_tail(b.substr(pos_)));
  };
  const auto skip_ws = [&](size_t q) {
    while (q < n && markup::is_ws(b[q])) ++q;
    return q;
  };

  switch (state_) {
    case State::kStart: {
      const size_t q = skip_ws(pos_);
      if (q == n && !final) return false;
      std::string_view which;
      const Match m = markup::match_any(b, q, {markup::kChannelOpen, markup::kThinkOpen}, &which);
      if (m == Match::kPartial && !final) return false;
      if (m == Match::kFull) {
        pos_ = q + which.size();
        if (which == markup::kChannelOpen) {
          close_ = markup::kChannelClose;
          state_ = State::kLabel;
        } else {
          close_ = markup::kThinkClose;
          state_ = State::kReasoning;
        }
        return true;
      }
      close_ = markup::kChannelClose;
      state_ = starts_in_reasoning_ ? State::kReasoning : State::kContent;
      return true;
    }

    case State::kLabel: {
      // "thought\n", or "thought" right before the closer, is the channel's label.
      const std::string_view rest = b.substr(pos_);
      const std::string_view label = markup::kThoughtLabel;
      const bool has_label = rest.substr(0, label.size()) == label;
      if (has_label) {
        const size_t after = pos_ + label.size();
        if (after < n && b[after] == '\n') {
          pos_ = after + 1;
        } else {
          const Match m = markup::match_at(b, after, markup::kChannelClose);
          if (after == n && !final) return false;
          if (m == Match::kPartial && !final) return false;
          if (m == Match::kFull || after == n) pos_ = after;  // "thought" then the closer or the end
        }
      } else if (label.substr(0, rest.size()) == rest && !final) {
        return false;  // may still become the label
      }
      state_ = thinking_enabled_ ? State::kReasoning : State::kEmptyCheck;
      return true;
    }

    case State::kEmptyCheck: {
      // Thinking off: only an empty block is a block; whitespace inside it is dropped either way.
      const size_t q = skip_ws(pos_);
      if (q == n) {
        if (final) pos_ = n;
        return false;
      }
      const Match m = markup::match_at(b, q, close_);
      if (m == Match::kPartial && !final) return false;
      pos_ = m == Match::kFull ? q + close_.size() : q;
      state_ = m == Match::kFull ? State::kContent : State::kUndecided;
      return true;
    }

    case State::kUndecided: {
      // Thinking off, a non-empty block: a thought if a closer follows, else the answer.
      Match m;
      std::string_view which;
      const size_t i = markup::find_marker(b, pos_, {close_, markup::kToolCallStart}, &m, &which);
      if (m == Match::kFull && which == close_) {
        emit(out.reasoning, i);
        pos_ = i + close_.size();
        state_ = State::kContent;
        return true;
      }
      if (m == Match::kFull || final) {  // a tool call or the end: it was the answer
        state_ = State::kContent;
        return true;
      }
      return false;  // hold everything until it is decided
    }

    case State::kReasoning: {
      Match m;
      std::string_view which;
      const size_t i = markup::find_marker(b, pos_, {close_, markup::kToolCallStart}, &m, &which);
      if (m == Match::kNone || (m == Match::kPartial && final)) {
        emit_rest(out.reasoning);
        return false;
      }
      emit(out.reasoning, i);
      if (m == Match::kPartial) return false;
      if (which == close_) pos_ = i + close_.size();  // a <|tool_call> stays: it is content
      state_ = State::kContent;
      return true;
    }

    case State::kContent:
      emit_rest(out.content);
      return false;
  }
  return false;
}

ReasoningDelta parse_reasoning(std::string_view text, bool thinking_enabled, bool starts_in_reasoning) {
  ReasoningParser parser(thinking_enabled, starts_in_reasoning);
  ReasoningDelta out = parser.feed(text);
  ReasoningDelta tail = parser.finish();
  out.reasoning += tail.reasoning;
  out.content += tail.content;
  return out;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  return prompt.ends_with("<|channel>") || prompt.ends_with("<|channel>thought\n");
}

}  // namespace dgemma
