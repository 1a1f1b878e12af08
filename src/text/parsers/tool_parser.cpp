#include "text/parsers/tool_parser.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <random>

#include "text/parsers/gemma4_args.h"
#include "text/parsers/markup_scan.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {
namespace {

using markup::Match;

constexpr size_t kMaxNameBytes = 256;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.';
}

}  // namespace

std::string tool_call_opening(std::string_view name) {
  std::string out = "<|tool_call>call:";
  if (!name.empty()) {
    out += name;
    out += '{';
  }
  return out;
}

std::string make_tool_call_id() {
  // Random per process, so ids do not repeat across restarts and replicas.
  static std::atomic<uint64_t> counter{(static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}() ^
                                       static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())};
  static constexpr char kAlnum[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
  const uint64_t seq = counter.fetch_add(1, std::memory_order_relaxed);
  std::string id = "call_";
  uint64_t z = 0;
  for (int i = 0; i < 24; ++i) {
    if (i % 8 == 0) z = rng::splitmix64(seq * 4 + static_cast<uint64_t>(i / 8));  // 8 digits per 64-bit word
    id += kAlnum[z % 62];
    z /= 62;
  }
  return id;
}

struct ToolCallParser::Impl {
  enum class State { kText, kHeader, kBody, kAfterBody, kRemainder };

  std::string buf;  // text not yet consumed starts at pos (an open call's text from call_start)
  size_t pos = 0;
  State state = State::kText;
  bool boundary = true;  // at the start or after a call: whitespace is dropped if a call or the end follows
  std::optional<Gemma4ArgsStream> args;
  bool open = false;      // a "<|tool_call>" was read and its call has not ended
  size_t call_start = 0;  // buf offset of the open call's "<|tool_call>"
  ParsedToolCall call;    // the open call
  int calls = 0;
  bool finished = false;

  void emit_content(Delta& out, size_t end) {
    out.content.append(buf, pos, end - pos);
    pos = end;
  }

  // Emits buf[pos, n) as content, holding back an incomplete UTF-8 character unless final.
  void emit_rest(Delta& out, bool final) {
    const size_t n = buf.size();
    emit_content(out, final ? n : n - markup::utf8_incomplete_tail(std::string_view(buf).substr(pos)));
  }

  // The open call ends at pos: emitted whole, and the text after it is read as text.
  void end_call(Delta& out) {
    call.text = buf.substr(call_start, pos - call_start);
    call.content_offset = out.content.size();
    out.calls.push_back(std::move(call));
    call = ParsedToolCall();
    open = false;
    ++calls;
    state = State::kText;
    boundary = true;
  }

  // Each returns true if it changed state (run again), false if it needs more text (or is done).
  bool text(Delta& out, bool final);
  bool header(Delta& out, bool final);
  bool body(bool final);
  bool after_body(Delta& out, bool final);
  bool remainder(Delta& out, bool final);

  void run(Delta& out, bool final) {
    for (;;) {
      bool again = false;
      switch (state) {
        case State::kText: again = text(out, final); break;
        case State::kHeader: again = header(out, final); break;
        case State::kBody:
          again = body(final);
          break;
        case State::kAfterBody: again = after_body(out, final); break;
        case State::kRemainder: again = remainder(out, final); break;
      }
      if (!again) break;
    }
    if (final) DG_CHECK(pos == buf.size() && !open);
    // Drop consumed text (a member in progress may still need its start; an open call keeps its text).
    size_t keep = state == State::kBody ? args->keep_from(pos) : pos;
    if (open) keep = std::min(keep, call_start);
    if (keep > 0) {
      buf.erase(0, keep);
      pos -= keep;
      if (open) call_start -= keep;
      if (state == State::kBody) args->shift(keep);
    }
  }
};

bool ToolCallParser::Impl::text(Delta& out, bool final) {
  const std::string_view b = buf;
  const size_t n = b.size();
  std::string_view which;
  if (boundary) {
    size_t q = pos;
    while (q < n && markup::is_ws(b[q])) ++q;
    if (q == n) {
      if (final) pos = n;  // whitespace at the end after a call is dropped
      return false;
    }
    const Match m = markup::match_any(b, q, {markup::kToolCallStart, markup::kToolResponse}, &which);
    if (m == Match::kPartial && !final) return false;
    if (m == Match::kFull && which == markup::kToolCallStart) {
      pos = q;  // whitespace before a call is dropped
    } else if (m == Match::kFull) {
      size_t r = q + which.size();
      while (r < n && markup::is_ws(b[r])) ++r;
      if (r == n) {
        if (final) pos = n;  // trailing <|tool_response>
        return false;
      }
    }
    boundary = false;
  }
  Match m;
  const size_t i = markup::find_marker(b, pos, {markup::kToolCallStart, markup::kToolResponse}, &m, &which);
  if (m == Match::kNone || (m == Match::kPartial && final)) {
    emit_rest(out, final);
    return false;
  }
  emit_content(out, i);
  if (m == Match::kPartial) return false;
  if (which == markup::kToolCallStart) {
    open = true;
    call_start = i;
    pos = i + which.size();
    state = State::kHeader;
    return true;
  }
  size_t r = i + which.size();  // <|tool_response>: dropped when only whitespace follows it
  while (r < n && markup::is_ws(b[r])) ++r;
  if (r == n) {
    if (final) pos = n;
    return false;
  }
  emit_content(out, i + which.size());
  return true;
}

bool ToolCallParser::Impl::header(Delta& out, bool final) {
  const std::string_view b = buf;
  const size_t n = b.size();
  // Not a call header: the text up to where a call would end is a call without a body (so no
  // "<|tool_call>" text passes as content; the caller rejects it).
  const auto not_a_call = [&](std::string_view name) {
    call.name.assign(name.substr(0, kMaxNameBytes));
    call.arguments_json = "{}";
    call.arguments = ParsedToolCall::Arguments::kNoBody;
    state = State::kRemainder;
    return true;
  };
  const auto skip_ws = [&](size_t q) {
    while (q < n && markup::is_ws(b[q])) ++q;
    return q;
  };
  const auto read_name = [&](size_t& q) {
    const size_t s = q;
    while (q < n && is_name_char(b[q]) && q - s <= kMaxNameBytes) ++q;
    return b.substr(s, q - s);
  };
  size_t q = skip_ws(pos);
  std::string_view name = read_name(q);
  if (name.size() > kMaxNameBytes) return not_a_call(name);
  size_t t = skip_ws(q);
  if (t == n) return final ? not_a_call(name) : false;
  if (name == "call" && b[t] == ':') {
    q = skip_ws(t + 1);
    name = read_name(q);
    if (name.size() > kMaxNameBytes) return not_a_call(name);
    t = skip_ws(q);
    if (t == n) return final ? not_a_call(name) : false;
  }
  if (name.empty()) return not_a_call(name);
  if (b[t] == '{' || b[t] == '(') {
    call.name.assign(name);
    args.emplace(b[t] == '{' ? Gemma4ArgsStream::Opener::kBrace : Gemma4ArgsStream::Opener::kParen);
    pos = t + 1;
    state = State::kBody;
    return true;
  }
  const Match m = markup::match_at(b, t, markup::kToolCallEnd);
  if (m == Match::kPartial && !final) return false;
  if (m == Match::kFull) {  // "<|tool_call>call:NAME<tool_call|>": a call without arguments
    call.name.assign(name);
    call.arguments_json = "{}";
    pos = t + markup::kToolCallEnd.size();
    end_call(out);
    return true;
  }
  return not_a_call(name);
}

bool ToolCallParser::Impl::body(bool final) {
  const auto status = args->run(buf, pos, final, call.arguments_json);
  if (status == Gemma4ArgsStream::Status::kNeedMore) return false;
  // Cut short by the end of the output (not by a marker) after some argument text: a value may be
  // truncated. An empty body cut there ("NAME{" and no room) holds nothing that could be.
  if (status == Gemma4ArgsStream::Status::kError)
    call.arguments = ParsedToolCall::Arguments::kMalformed;
  else if (args->cut_short() && pos == buf.size() && call.arguments_json != "{}")
    call.arguments = ParsedToolCall::Arguments::kCutShort;
  state = status == Gemma4ArgsStream::Status::kDone ? State::kAfterBody : State::kRemainder;
  args.reset();
  return true;
}

bool ToolCallParser::Impl::after_body(Delta& out, bool final) {
  const std::string_view b = buf;
  const size_t n = b.size();
  size_t q = pos;
  while (q < n && (markup::is_ws(b[q]) || b[q] == '}' || b[q] == ')' || b[q] == ']')) ++q;
  pos = q;  // whitespace and stray closing brackets after a body are dropped
  if (q == n) {
    if (!final) return false;
    end_call(out);
    return true;
  }
  std::string_view which;
  const Match m =
      markup::match_any(b, q, {markup::kToolCallEnd, markup::kToolCallStart, markup::kToolResponse}, &which);
  if (m == Match::kPartial && !final) return false;
  if (m == Match::kFull) {
    if (which == markup::kToolCallEnd) pos = q + which.size();
    end_call(out);
    return true;
  }
  state = State::kRemainder;
  return true;
}

bool ToolCallParser::Impl::remainder(Delta& out, bool final) {
  Match m;
  std::string_view which;
  const size_t i = markup::find_marker(
      buf, pos, {markup::kToolCallEnd, markup::kToolCallStart, markup::kToolResponse}, &m, &which);
  if (m == Match::kNone || (m == Match::kPartial && final)) {
    if (!final) return false;  // held: the call's end decides where this text belongs
    call.stray.append(buf, pos, buf.size() - pos);
    pos = buf.size();
    end_call(out);
    return true;
  }
  if (m == Match::kPartial) return false;
  call.stray.append(buf, pos, i - pos);
  pos = which == markup::kToolCallEnd ? i + which.size() : i;
  end_call(out);
  return true;
}

ToolCallParser::ToolCallParser() : impl_(std::make_unique<Impl>()) {}
ToolCallParser::~ToolCallParser() = default;
ToolCallParser::ToolCallParser(ToolCallParser&&) noexcept = default;
ToolCallParser& ToolCallParser::operator=(ToolCallParser&&) noexcept = default;

ToolCallParser::Delta ToolCallParser::feed(std::string_view text) {
  DG_CHECK(!impl_->finished);
  impl_->buf.append(text);
  Delta out;
  impl_->run(out, false);
  return out;
}

ToolCallParser::Delta ToolCallParser::finish() {
  DG_CHECK(!impl_->finished);
  impl_->finished = true;
  Delta out;
  impl_->run(out, true);
  return out;
}

bool ToolCallParser::saw_tool_call() const { return impl_->calls > 0; }

ToolParseResult parse_tool_calls(std::string_view text) {
  ToolCallParser parser;
  ToolParseResult result;
  for (ToolCallParser::Delta d : {parser.feed(text), parser.finish()}) {
    for (ParsedToolCall& c : d.calls) {
      c.content_offset += result.content.size();
      result.calls.push_back(std::move(c));
    }
    result.content += d.content;
  }
  return result;
}

}  // namespace dgemma
