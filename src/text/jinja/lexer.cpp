// Tokenises a template the way jinja2's lexer does (jinja2/lexer.py), for the default syntax only.
#include "text/jinja/lexer.h"

#include <fmt/format.h>

#include "text/jinja/pystr.h"
#include "util/error.h"

namespace dgemma::jinja {

void syntax_error(int line, const std::string& message) {
  throw Error(ErrorKind::kUnsupported, fmt::format("chat template line {}: {}", line, message));
}

namespace {

// Length of the whitespace run starting at s[i].
size_t space_run(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size()) {
    uint32_t cp;
    const size_t n = decode_code_point(s, j, &cp);
    if (!py_is_space(cp)) break;
    j += n;
  }
  return j - i;
}

// text.rstrip() with Python's whitespace.
std::string_view rstrip(std::string_view s) {
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = decode_code_point(s, i, &cp);
    if (!py_is_space(cp)) end = i + n;
    i += n;
  }
  return s.substr(0, end);
}

bool all_space(std::string_view s) { return space_run(s, 0) == s.size(); }

// source.splitlines() joined with "\n": every line break (\r\n, \r, \n, \v, \f, \x1c-\x1e, \x85,
// U+2028, U+2029) becomes "\n" and one trailing line break is dropped (keep_trailing_newline=False).
std::string normalise_newlines(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool ended_with_break = false;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    size_t n = decode_code_point(s, i, &cp);
    const bool brk = cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
                     cp == 0x2028 || cp == 0x2029;
    if (brk) {
      if (cp == '\r' && i + 1 < s.size() && s[i + 1] == '\n') n = 2;
      out += '\n';
      ended_with_break = true;
    } else {
      out.append(s, i, n);
      ended_with_break = false;
    }
    i += n;
  }
  if (ended_with_break) out.pop_back();
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body.
std::string decode_string(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out += c;
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': case 'u': case 'U': {
        const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
          if (i + 1 >= body.size() || hex_value(body[i + 1]) < 0)
            syntax_error(line, fmt::format("truncated \\{} escape in a string literal", e));
          v = v * 16 + static_cast<uint32_t>(hex_value(body[++i]));
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v < 0xE000)) syntax_error(line, "invalid code point escape in a string literal");
        append_code_point(out, v);
        break;
      }
      case 'N':
        syntax_error(line, "\\N{...} escapes are not supported");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            v = v * 8 + static_cast<uint32_t>(body[++i] - '0');
          append_code_point(out, v);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalise_newlines(source)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_data();
    push(TokenType::kEof, "");
    return std::move(tokens_);
  }

 private:
  void push(TokenType t, std::string text) { tokens_.push_back(Token{t, std::move(text), 0, 0, line_}); }

  void advance_to(size_t p) {
    for (size_t k = pos_; k < p; ++k) line_ += src_[k] == '\n';
    pos_ = p;
  }

  void lex_data() {
    size_t p = pos_;
    while (true) {
      p = src_.find('{', p);
      if (p == std::string::npos || p + 1 >= src_.size()) {
        emit_data(std::string_view(src_).substr(pos_));
        advance_to(src_.size());
        return;
      }
      const char k = src_[p + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++p;
    }
    const char kind = src_[p + 1];
    const char sign = p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+') ? src_[p + 2] : 0;
    std::string_view text = std::string_view(src_).substr(pos_, p - pos_);
    if (sign == '-') {
      text = rstrip(text);
    } else if (sign != '+' && kind != '{') {  // lstrip_blocks: blocks and comments only
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(text.substr(l_pos))) text = text.substr(0, l_pos);
    }
    emit_data(text);
    advance_to(p);
    const size_t body = p + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      lex_comment(body);
    } else if (kind == '%' && try_raw(body)) {
    } else {
      advance_to(body);
      push(kind == '{' ? TokenType::kVarBegin : TokenType::kBlockBegin, "");
      lex_tag(kind == '{');
    }
  }

  void emit_data(std::string_view text) {
    if (!text.empty()) tokens_.push_back(Token{TokenType::kData, std::string(text), 0, 0, line_});
  }

  // After a tag end at `end` (one past its last character): trim_blocks or `-` whitespace control.
  void finish_tag(size_t end, char sign, bool trim_newline) {
    if (sign == '-') {
      end += space_run(src_, end);
    } else if (sign != '+' && trim_newline && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    advance_to(end);
  }

  void lex_comment(size_t body) {
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos) syntax_error(line_, "unterminated comment ({# without #})");
    const char sign = close > body && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    finish_tag(close + 2, sign, /*trim_newline=*/true);
  }

  // `{% raw %}...{% endraw %}`: the body is data, verbatim.
  bool try_raw(size_t body) {
    size_t q = body + space_run(src_, body);
    if (src_.compare(q, 3, "raw") != 0) return false;
    q += 3;
    q += space_run(src_, q);
    char sign = 0;
    if (q < src_.size() && src_[q] == '-') sign = '-', ++q;
    if (src_.compare(q, 2, "%}") != 0) return false;
    q += 2;
    if (sign == '-') q += space_run(src_, q);
    size_t search = q;
    while (true) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) syntax_error(line_, "unterminated {% raw %} block");
      size_t r = open + 2;
      const char open_sign = r < src_.size() && (src_[r] == '-' || src_[r] == '+') ? src_[r++] : 0;
      r += space_run(src_, r);
      if (src_.compare(r, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      r += 6;
      r += space_run(src_, r);
      char end_sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) end_sign = src_[r++];
      if (src_.compare(r, 2, "%}") != 0) syntax_error(line_, "malformed {% endraw %}");
      std::string_view text = std::string_view(src_).substr(q, open - q);
      if (open_sign == '-') text = rstrip(text);
      emit_data(text);
      advance_to(open);
      finish_tag(r + 2, end_sign, true);
      return true;
    }
  }

  void lex_tag(bool is_var) {
    int depth = 0;  // open brackets: tag ends are not recognised inside them (as jinja2's balancing)
    while (true) {
      pos_ += 0;
      const size_t ws = space_run(src_, pos_);
      advance_to(pos_ + ws);
      if (pos_ >= src_.size()) syntax_error(line_, is_var ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      if (depth == 0) {
        const std::string_view end = is_var ? "}}" : "%}";
        char sign = 0;
        size_t at = pos_;
        if ((src_[at] == '-' || (!is_var && src_[at] == '+')) && src_.compare(at + 1, 2, end) == 0) sign = src_[at++];
        if (src_.compare(at, 2, end) == 0) {
          push(is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, "");
          finish_tag(at + 2, sign, /*trim_newline=*/!is_var);
          return;
        }
      }
      const char c = src_[pos_];
      if (is_digit(c)) {
        lex_number();
      } else if (is_name_start(c)) {
        size_t e = pos_;
        while (e < src_.size() && (is_name_start(src_[e]) || is_digit(src_[e]))) ++e;
        push(TokenType::kName, src_.substr(pos_, e - pos_));
        advance_to(e);
      } else if (c == '\'' || c == '"') {
        size_t e = pos_ + 1;
        while (e < src_.size() && src_[e] != c) e += src_[e] == '\\' ? 2 : 1;
        if (e >= src_.size()) syntax_error(line_, "unterminated string literal");
        const int start_line = line_;
        Token t{TokenType::kString, decode_string(std::string_view(src_).substr(pos_ + 1, e - pos_ - 1), start_line), 0, 0, start_line};
        tokens_.push_back(std::move(t));
        advance_to(e + 1);
      } else {
        static constexpr std::string_view kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                                    "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
        std::string_view op;
        for (std::string_view o : kOps)
          if (src_.compare(pos_, o.size(), o) == 0) {
            op = o;
            break;
          }
        if (op.empty()) syntax_error(line_, fmt::format("unexpected character '{}'", c));
        if (op == "(" || op == "[" || op == "{") ++depth;
        if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
        push(TokenType::kOp, std::string(op));
        advance_to(pos_ + op.size());
      }
    }
  }

  // Integers and floats: digits with optional '_' separators, a fraction needs digits after '.'.
  void lex_number() {
    auto digits = [&](size_t p) {
      size_t e = p;
      while (e < src_.size() && (is_digit(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() && is_digit(src_[e + 1]) && e > p)))
        ++e;
      return e;
    };
    size_t e = digits(pos_);
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && is_digit(src_[x])) {
        e = digits(x);
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = pos_; k < e; ++k)
      if (src_[k] != '_') text += src_[k];
    Token t{is_float ? TokenType::kFloat : TokenType::kInt, text, 0, 0, line_};
    try {
      if (is_float) {
        t.float_value = std::stod(text);
      } else {
        t.int_value = std::stoll(text);
      }
    } catch (const std::exception&) {
      syntax_error(line_, "number literal out of range: " + text);
    }
    tokens_.push_back(std::move(t));
    advance_to(e);
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace dgemma::jinja
