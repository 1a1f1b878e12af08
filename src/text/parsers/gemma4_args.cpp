#include "text/parsers/gemma4_args.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <system_error>

#include "text/parsers/markup_scan.h"
#include "util/error.h"

namespace dgemma {
namespace {

using markup::Match;

// Control markers that end an argument body wherever they appear (also inside a string): the model
// never means them as text, and swallowing them would swallow the next call or the end of the call.
constexpr std::initializer_list<std::string_view> kTerminators = {
    markup::kToolCallEnd, markup::kToolCallStart, markup::kToolResponse};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Whether a JSON numeral ('-'? digits ('.' digits)? ([eE] sign? digits)?) is beyond a double's range
// (1e400): JSON parsers refuse it or read infinity. Underflow (1e-400) reads as 0 everywhere and stays a
// number. from_chars reports both as out of range; the numeral's decimal magnitude tells them apart.
bool overflows_double(std::string_view num) {
  double v = 0;
  const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), v, std::chars_format::general);
  (void)end;
  if (ec != std::errc::result_out_of_range) return false;
  size_t i = num.empty() || num[0] != '-' ? 0 : 1;
  int64_t magnitude = 0;  // ~ log10 |value|, saturated
  size_t int_digits = 0, first_frac_digit = 0;
  bool seen_nonzero = false;
  for (; i < num.size() && is_digit(num[i]); ++i)
    if (seen_nonzero || num[i] != '0') seen_nonzero = true, ++int_digits;
  if (i < num.size() && num[i] == '.')
    for (++i; i < num.size() && is_digit(num[i]); ++i)
      if (!seen_nonzero) {
        ++first_frac_digit;
        if (num[i] != '0') seen_nonzero = true;
      }
  magnitude = int_digits > 0 ? static_cast<int64_t>(int_digits) : -static_cast<int64_t>(first_frac_digit);
  if (i < num.size() && (num[i] == 'e' || num[i] == 'E')) {
    ++i;
    const bool negative = i < num.size() && num[i] == '-';
    if (i < num.size() && (num[i] == '-' || num[i] == '+')) ++i;
    int64_t e = 0;
    for (; i < num.size() && is_digit(num[i]); ++i) e = std::min<int64_t>(e * 10 + (num[i] - '0'), int64_t{1} << 40);
    magnitude += negative ? -e : e;
  }
  return magnitude > 0;
}
bool is_close_char(char c) { return c == '}' || c == ']' || c == ')'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && markup::is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && markup::is_ws(s.back())) s.remove_suffix(1);
  return s;
}

// A bare value as JSON: literal, number or string (see gemma4_args.h for the rules).
std::string scalar_json(std::string_view raw) {
  if (raw == "true" || raw == "True" || raw == "TRUE") return "true";
  if (raw == "false" || raw == "False" || raw == "FALSE") return "false";
  if (raw == "null" || raw == "Null" || raw == "NULL" || raw == "None" || raw == "none" || raw == "nil")
    return "null";
  const size_t n = raw.size();
  size_t i = 0;
  std::string num;
  if (n > 0 && (raw[0] == '-' || raw[0] == '+')) {
    if (raw[0] == '-') num += '-';
    i = 1;
  }
  const size_t int_start = i;
  while (i < n && is_digit(raw[i])) ++i;
  std::string_view int_part = raw.substr(int_start, i - int_start);
  bool dot = false;
  std::string_view frac;
  if (i < n && raw[i] == '.') {
    dot = true;
    const size_t s = ++i;
    while (i < n && is_digit(raw[i])) ++i;
    frac = raw.substr(s, i - s);
  }
  std::string_view exp;
  if (i < n && (raw[i] == 'e' || raw[i] == 'E')) {
    const size_t s = i++;
    if (i < n && (raw[i] == '+' || raw[i] == '-')) ++i;
    const size_t d = i;
    while (i < n && is_digit(raw[i])) ++i;
    if (i == d) return markup::json_quote(raw);
    exp = raw.substr(s, i - s);
  }
  const bool leading_zero = int_part.size() > 1 && int_part[0] == '0';  // "007" is an id, not 7
  if (i != n || (int_part.empty() && frac.empty()) || leading_zero) return markup::json_quote(raw);
  num += int_part.empty() ? std::string_view("0") : int_part;
  if (dot) {
    num += '.';
    num += frac.empty() ? std::string_view("0") : frac;
  }
  num += exp;
  if (overflows_double(num)) return markup::json_quote(raw);  // "1e400": no client reads it as a number
  return num;
}

char closer_of(bool frame_is_array) { return frame_is_array ? ']' : '}'; }

// 4 hex digits at text[at..]: value, -1 if not hex, -2 if the text ends before 4 digits (all hex).
int hex4(std::string_view text, size_t at) {
  int v = 0;
  for (size_t k = 0; k < 4; ++k) {
    if (at + k >= text.size()) return -2;
    const char c = text[at + k];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

Gemma4ArgsStream::Gemma4ArgsStream(Opener opener) {
  const Frame f = opener == Opener::kBrace ? Frame::kObject
                  : opener == Opener::kParen ? Frame::kParen
                                             : Frame::kImplicit;
  stack_.push_back({f, Slot::kKey, false});
}

size_t Gemma4ArgsStream::keep_from(size_t pos) const { return member_open_ ? member_start_ : pos; }

void Gemma4ArgsStream::shift(size_t removed) {
  if (member_open_) member_start_ -= removed;
}

void Gemma4ArgsStream::write_prefix(std::string& out) {
  Level& top = stack_.back();
  if (top.any) out += ", ";
  top.any = true;
  if (top.frame != Frame::kArray) {
    out += markup::json_quote(key_);
    out += ": ";
  }
  member_open_ = false;
}

void Gemma4ArgsStream::string_chunk(std::string_view raw, std::string& out) {
  if (str_is_key_) key_.append(raw);
  else markup::append_json_escaped(out, raw, true);
}

void Gemma4ArgsStream::end_string(bool implicit, std::string& out) {
  if (implicit) clean_ = false;
  if (str_is_key_) stack_.back().slot = Slot::kSep;
  else out += '"';
  str_ = Str::kNone;
}

Gemma4ArgsStream::StrResult Gemma4ArgsStream::scan_string(std::string_view text, size_t& pos, bool final,
                                                          std::string& out) {
  const size_t n = text.size();
  const char quote = str_ == Str::kDouble ? '"' : str_ == Str::kSingle ? '\'' : '\0';
  for (;;) {
    // Stops at the closing quote, a backslash escape or a markup byte (the delimiter or a control marker).
    static constexpr std::string_view kDoubleStops = "\"\\\xF8\xF9\xFA\xFB\xFC\xFD";
    static constexpr std::string_view kSingleStops = "'\\\xF8\xF9\xFA\xFB\xFC\xFD";
    static constexpr std::string_view kDelimStops = "\xF8\xF9\xFA\xFB\xFC\xFD";
    size_t k = text.find_first_of(str_ == Str::kDouble   ? kDoubleStops
                                  : str_ == Str::kSingle ? kSingleStops
                                                         : kDelimStops,
                                  pos);
    if (k == std::string_view::npos) k = n;
    // Plain text up to k. A character cut by the end of the buffer waits for its remaining bytes.
    std::string_view chunk = text.substr(pos, k - pos);
    if (str_is_key_) {
      size_t use = chunk.size();
      if (k == n && !final) use -= markup::utf8_incomplete_tail(chunk);
      key_.append(chunk.substr(0, use));
      pos += use;
    } else {
      pos += markup::append_json_escaped(out, chunk, k < n || final);
    }
    if (pos < k) return StrResult::kMore;
    if (k == n) {
      if (!final) return StrResult::kMore;
      if (str_is_key_) return StrResult::kError;  // a key cut off by the end of the text
      end_string(true, out);
      return StrResult::kOk;
    }
    const char c = text[k];
    if (c == quote) {
      ++pos;
      end_string(false, out);
      return StrResult::kOk;
    }
    if (markup::is_markup_byte(c)) {
      std::string_view which;
      Match m = markup::match_any(
          text, k, {markup::kStringDelim, markup::kToolCallEnd, markup::kToolCallStart, markup::kToolResponse},
          &which);
      if (m == Match::kFull) {
        if (which == markup::kStringDelim) {
          pos += which.size();
          if (quote) continue;  // "<|"|>x<|"|>": a delimiter leaked into a quoted string is never text
          end_string(false, out);
          return StrResult::kOk;
        }
        if (str_is_key_) return StrResult::kError;
        end_string(true, out);  // a control marker cuts the string short; the caller sees it next
        return StrResult::kOk;
      }
      ++pos;  // another markup token inside a string: not text (append_json_escaped would drop it too)
      continue;
    }
    // Backslash escape in a quoted string.
    if (k + 1 >= n) {
      if (!final) return StrResult::kMore;
      string_chunk("\\", out);
      ++pos;
      continue;
    }
    const char e = text[k + 1];
    std::string dec;
    size_t used = 2;
    switch (e) {
      case '"': case '\'': case '\\': case '/': dec = e; break;
      case 'b': dec = "\b"; break;
      case 'f': dec = "\f"; break;
      case 'n': dec = "\n"; break;
      case 'r': dec = "\r"; break;
      case 't': dec = "\t"; break;
      case 'u': {
        const int v = hex4(text, k + 2);
        if (v == -2 && !final) return StrResult::kMore;
        if (v < 0) {  // not a \uXXXX escape: keep the backslash as text
          dec = "\\";
          used = 1;
          break;
        }
        used = 6;
        if (v >= 0xD800 && v <= 0xDBFF) {
          // A high surrogate pairs with a following \uDC00-\uDFFF escape.
          const size_t s = k + 6;
          if (!final && (s >= n || (text[s] == '\\' && (s + 1 >= n || (text[s + 1] == 'u' && hex4(text, s + 2) == -2)))))
            return StrResult::kMore;
          const int lo = (s + 1 < n && text[s] == '\\' && text[s + 1] == 'u') ? hex4(text, s + 2) : -1;
          if (lo >= 0xDC00 && lo <= 0xDFFF) {
            markup::append_utf8(dec, 0x10000 + ((static_cast<unsigned>(v) - 0xD800) << 10) +
                                         (static_cast<unsigned>(lo) - 0xDC00));
            used = 12;
          } else {
            dec = "\xEF\xBF\xBD";
          }
        } else if (v >= 0xDC00 && v <= 0xDFFF) {
          dec = "\xEF\xBF\xBD";  // lone low surrogate
        } else {
          markup::append_utf8(dec, static_cast<unsigned>(v));
        }
        break;
      }
      default:  // unknown escape: keep the backslash, the next character is read normally
        dec = "\\";
        used = 1;
    }
    string_chunk(dec, out);
    pos = k + used;
  }
}

Gemma4ArgsStream::Status Gemma4ArgsStream::fail(size_t at, size_t& pos, std::string& out) {
  pos = at;
  if (str_ != Str::kNone && !str_is_key_) out += '"';
  str_ = Str::kNone;
  while (!stack_.empty()) {
    out += closer_of(stack_.back().frame == Frame::kArray);
    stack_.pop_back();
  }
  clean_ = false;
  ended_ = true;
  end_status_ = Status::kError;
  return Status::kError;
}

Gemma4ArgsStream::Status Gemma4ArgsStream::finish_all(std::string& out) {
  Level& top = stack_.back();
  if (top.frame != Frame::kArray && top.slot == Slot::kValue) {  // "{a:" -> {"a": ""}
    write_prefix(out);
    out += "\"\"";
    top.slot = Slot::kNext;
  }
  cut_short_ = stack_.front().frame != Frame::kImplicit;
  while (!stack_.empty()) {
    if (stack_.back().frame != Frame::kImplicit) clean_ = false;
    out += closer_of(stack_.back().frame == Frame::kArray);
    stack_.pop_back();
  }
  ended_ = true;
  end_status_ = Status::kDone;
  return Status::kDone;
}

bool Gemma4ArgsStream::closes(Frame f, char c) {
  return (f == Frame::kObject && c == '}') || (f == Frame::kParen && c == ')') || (f == Frame::kArray && c == ']');
}

bool Gemma4ArgsStream::any_closes(char c) const {
  for (const Level& l : stack_)
    if (closes(l.frame, c)) return true;
  return false;
}

Gemma4ArgsStream::Status Gemma4ArgsStream::close_bracket(char c, size_t& pos, std::string& out) {
  size_t i = stack_.size();
  while (i > 0 && !closes(stack_[i - 1].frame, c)) --i;
  if (i == 0) return fail(pos, pos, out);
  Level& top = stack_.back();
  if (top.frame != Frame::kArray && top.slot == Slot::kValue) {  // "{a:}" -> {"a": ""}
    write_prefix(out);
    out += "\"\"";
    top.slot = Slot::kNext;
  }
  while (stack_.size() >= i) {
    if (stack_.size() > i) clean_ = false;  // an inner container closed by an outer bracket
    out += closer_of(stack_.back().frame == Frame::kArray);
    stack_.pop_back();
  }
  ++pos;
  if (stack_.empty()) {
    ended_ = true;
    end_status_ = Status::kDone;
    return Status::kDone;
  }
  return Status::kNeedMore;  // "keep going"
}

Gemma4ArgsStream::Status Gemma4ArgsStream::run(std::string_view text, size_t& pos, bool final, std::string& out) {
  if (!started_) {
    out += '{';
    started_ = true;
  }
  if (ended_) return end_status_;
  const size_t n = text.size();
  for (;;) {
    if (str_ != Str::kNone) {
      const StrResult r = scan_string(text, pos, final, out);
      if (r == StrResult::kMore) return Status::kNeedMore;
      if (r == StrResult::kError) return fail(member_start_, pos, out);
      continue;
    }
    while (pos < n && markup::is_ws(text[pos])) ++pos;
    Level& top = stack_.back();
    const bool object_like = top.frame != Frame::kArray;
    if (pos == n) {
      if (!final) return Status::kNeedMore;
      if (object_like && top.slot == Slot::kSep) return fail(member_start_, pos, out);
      return finish_all(out);
    }
    const Match marker = markup::match_any(text, pos, kTerminators);
    if (marker == Match::kFull) {
      if (object_like && top.slot == Slot::kSep) return fail(member_start_, pos, out);
      return finish_all(out);
    }
    if (marker == Match::kPartial && !final) return Status::kNeedMore;
    const char c = text[pos];

    if (object_like && top.slot == Slot::kSep) {
      if (c != ':' && c != '=') return fail(member_start_, pos, out);
      ++pos;
      top.slot = Slot::kValue;
      continue;
    }
    if (top.slot == Slot::kNext) {
      if (c == ',') {
        ++pos;
        top.slot = object_like ? Slot::kKey : Slot::kValue;
        continue;
      }
      if (is_close_char(c)) {
        if (close_bracket(c, pos, out) != Status::kNeedMore) return end_status_;
        continue;
      }
      top.slot = object_like ? Slot::kKey : Slot::kValue;  // a missing comma is tolerated
      continue;
    }
    if (object_like && top.slot == Slot::kKey) {
      if (c == ',') {  // extra commas are tolerated
        ++pos;
        continue;
      }
      if (is_close_char(c)) {
        if (close_bracket(c, pos, out) != Status::kNeedMore) return end_status_;
        continue;
      }
      const Match delim = markup::match_at(text, pos, markup::kStringDelim);
      if (delim == Match::kPartial && !final) return Status::kNeedMore;
      if (delim == Match::kFull || c == '"' || c == '\'') {
        member_open_ = true;
        member_start_ = pos;
        key_.clear();
        str_is_key_ = true;
        str_ = delim == Match::kFull ? Str::kDelim : c == '"' ? Str::kDouble : Str::kSingle;
        pos += delim == Match::kFull ? markup::kStringDelim.size() : 1;
        continue;
      }
      // Bare key: runs to ':' or '='.
      size_t q = pos + bare_scanned_;
      while (q < n && std::string_view(":=,{}[]()\"'<").find(text[q]) == std::string_view::npos) ++q;
      if (q == n && !final) {
        bare_scanned_ = q - pos;
        return Status::kNeedMore;
      }
      bare_scanned_ = 0;
      std::string_view key = trim(text.substr(pos, q - pos));
      if (q == n || (text[q] != ':' && text[q] != '=') || key.empty()) return fail(pos, pos, out);
      member_open_ = true;
      member_start_ = pos;
      key_.assign(key);
      pos = q + 1;
      top.slot = Slot::kValue;
      continue;
    }
    // A value (object slot kValue, or array slot kValue which also accepts ',' and ']').
    if (!object_like && c == ',') {
      ++pos;
      continue;
    }
    if (is_close_char(c) && any_closes(c)) {  // in an object "{a:}" the value is empty ("")
      if (close_bracket(c, pos, out) != Status::kNeedMore) return end_status_;
      continue;
    }
    if (object_like && c == ',') {
      write_prefix(out);
      out += "\"\"";
      top.slot = Slot::kNext;
      continue;
    }
    const Match delim = markup::match_at(text, pos, markup::kStringDelim);
    if (delim == Match::kPartial && !final) return Status::kNeedMore;
    if (delim == Match::kFull || c == '"' || c == '\'') {
      if (!object_like) member_start_ = pos;
      write_prefix(out);
      out += '"';
      top.slot = Slot::kNext;
      str_is_key_ = false;
      str_ = delim == Match::kFull ? Str::kDelim : c == '"' ? Str::kDouble : Str::kSingle;
      pos += delim == Match::kFull ? markup::kStringDelim.size() : 1;
      continue;
    }
    if (c == '{' || c == '[') {
      if (stack_.size() >= kMaxDepth) return fail(member_open_ ? member_start_ : pos, pos, out);
      write_prefix(out);
      out += c;
      top.slot = Slot::kNext;
      stack_.push_back({c == '{' ? Frame::kObject : Frame::kArray, c == '{' ? Slot::kKey : Slot::kValue, false});
      ++pos;
      continue;
    }
    // Bare scalar: runs to ',' or a bracket that closes an open container, or a marker.
    size_t q = pos + bare_scanned_;
    for (; q < n; ++q) {
      const char d = text[q];
      if (d == ',') break;
      if (is_close_char(d) && any_closes(d)) break;
      if (markup::is_markup_byte(d) &&
          markup::match_any(text, q,
                            {markup::kStringDelim, markup::kToolCallEnd, markup::kToolCallStart,
                             markup::kToolResponse}) == Match::kFull)
        break;
    }
    if (q == n && !final) {
      bare_scanned_ = q - pos;
      return Status::kNeedMore;
    }
    bare_scanned_ = 0;
    write_prefix(out);
    out += scalar_json(trim(text.substr(pos, q - pos)));
    top.slot = Slot::kNext;
    pos = q;
  }
}

Json gemma4_args_to_json(std::string_view args) {
  size_t pos = 0;
  while (pos < args.size() && markup::is_ws(args[pos])) ++pos;
  auto opener = Gemma4ArgsStream::Opener::kNone;
  if (pos < args.size() && (args[pos] == '{' || args[pos] == '(')) {
    opener = args[pos] == '{' ? Gemma4ArgsStream::Opener::kBrace : Gemma4ArgsStream::Opener::kParen;
    ++pos;
  }
  Gemma4ArgsStream stream(opener);
  std::string json;
  const auto status = stream.run(args, pos, true, json);
  if (status == Gemma4ArgsStream::Status::kError)
    fail_arg("tool call arguments: cannot parse at byte {}", pos);
  if (!stream.clean()) fail_arg("tool call arguments: unterminated string or container");
  while (pos < args.size() && markup::is_ws(args[pos])) ++pos;
  if (pos != args.size()) fail_arg("tool call arguments: unexpected text at byte {}", pos);
  return parse_json(json, "tool call arguments", false);
}

namespace {
void dump_to(std::string& out, const Json& v) {
  switch (v.type()) {
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += markup::json_quote(it.key());
        out += ": ";
        dump_to(out, it.value());
      }
      out += '}';
      break;
    }
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const Json& e : v) {
        if (!first) out += ", ";
        first = false;
        dump_to(out, e);
      }
      out += ']';
      break;
    }
    case Json::value_t::string:
      out += markup::json_quote(v.get_ref<const std::string&>());
      break;
    default:
      out += v.dump();  // numbers, booleans, null
  }
}
}  // namespace

std::string gemma4_dump_json(const Json& value) {
  std::string out;
  dump_to(out, value);
  return out;
}

}  // namespace dgemma
