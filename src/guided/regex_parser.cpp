#include "guided/regex_parser.h"

#include "text/tokenizer/utf8.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

CodeSet digit_set() {
  return CodeSet::range('0', '9');
}

CodeSet word_set() {
  CodeSet s = CodeSet::range('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_');
  return s;
}

// "." : every code point but the ECMAScript line terminators.
CodeSet dot_set() {
  CodeSet s = CodeSet::all();
  CodeSet terminators = CodeSet::of('\n');
  terminators.add('\r');
  terminators.add(0x2028, 0x2029);
  return s.minus(terminators);
}

bool is_hex(char32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
int hex_value(char32_t c) {
  return c <= '9' ? static_cast<int>(c - '0') : static_cast<int>((c | 0x20) - 'a' + 10);
}
bool is_digit(char32_t c) {
  return c >= '0' && c <= '9';
}

class Parser {
 public:
  Parser(Ast& ast, std::string_view pattern) : ast_(ast) {
    if (pattern.size() > ast.limits().max_source_bytes)
      fail_arg("regex: the pattern is {} bytes, more than the limit of {}", pattern.size(),
               ast.limits().max_source_bytes);
    for (size_t pos = 0; pos < pattern.size();) {
      const utf8::Decoded d = utf8::decode(pattern, pos);
      if (!d.valid) fail_arg("regex: invalid UTF-8 at byte offset {}", pos);
      cps_.push_back(d.cp);
      offsets_.push_back(pos);
      pos += static_cast<size_t>(d.len);
    }
    offsets_.push_back(pattern.size());
  }

  NodeId parse() {
    const NodeId root = alternation(0);
    if (!at_end()) error("unbalanced ')'");
    return root;
  }

 private:
  bool at_end() const { return i_ >= cps_.size(); }
  char32_t peek(size_t ahead = 0) const { return i_ + ahead < cps_.size() ? cps_[i_ + ahead] : char32_t{0}; }
  bool has(size_t ahead) const { return i_ + ahead < cps_.size(); }
  size_t offset() const { return offsets_[std::min(i_, cps_.size())]; }

  [[noreturn]] void error(std::string_view what) const {
    fail_arg("regex: {} at byte offset {} of the pattern", what, offset());
  }
  [[noreturn]] void unsupported(std::string_view what) const {
    throw Error(ErrorKind::kUnsupported,
                fmt::format("regex: {} (at byte offset {}) is not supported", what, offset()));
  }

  NodeId alternation(int depth) {
    if (depth > ast_.limits().max_nesting)
      error(fmt::format("groups nested deeper than {}", ast_.limits().max_nesting));
    std::vector<NodeId> branches = {concatenation(depth)};
    while (!at_end() && peek() == '|') {
      ++i_;
      branches.push_back(concatenation(depth));
    }
    return ast_.alt(std::move(branches));
  }

  NodeId concatenation(int depth) {
    std::vector<NodeId> items;
    bool ended = false;  // an end anchor was seen
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (ended) unsupported("text after the end anchor '$'");
      if (anchor_start()) {
        if (depth > 0 || !items.empty())
          unsupported("the anchor '^' inside the pattern (anchors are allowed at its ends)");
        continue;
      }
      if (anchor_end()) {
        if (depth > 0)
          unsupported("the anchor '$' inside a group (anchors are allowed at the pattern's ends)");
        ended = true;
        continue;
      }
      const NodeId a = atom(depth);
      items.push_back(quantified(a));
    }
    return ast_.concat(std::move(items));
  }

  bool anchor_start() {
    if (peek() == '^') return ++i_, true;
    if (peek() == '\\' && peek(1) == 'A') return i_ += 2, true;
    return false;
  }
  bool anchor_end() {
    if (peek() == '$') return ++i_, true;
    if (peek() == '\\' && (peek(1) == 'Z' || peek(1) == 'z')) return i_ += 2, true;
    return false;
  }

  // {m}, {m,}, {m,n} at i_: fills min / max and the length in code points; false if not that form.
  bool bounds_at(size_t at, int& min, int& max, size_t& length) const {
    size_t j = at;
    if (j >= cps_.size() || cps_[j] != '{') return false;
    ++j;
    auto number = [&](int& v) {
      const size_t begin = j;
      int64_t x = 0;
      while (j < cps_.size() && is_digit(cps_[j])) {
        x = std::min<int64_t>(x * 10 + (cps_[j] - '0'), int64_t{1} << 40);
        ++j;
      }
      v = static_cast<int>(std::min<int64_t>(x, INT32_MAX));
      return j > begin;
    };
    if (!number(min)) {
      if (j < cps_.size() && cps_[j] == ',') {
        size_t k = j + 1;
        while (k < cps_.size() && is_digit(cps_[k])) ++k;
        if (k > j + 1 && k < cps_.size() && cps_[k] == '}')
          throw Error(ErrorKind::kUnsupported,
                      fmt::format("regex: the quantifier {{,n}} (at byte offset {}) is "
                                  "ambiguous between dialects; write {{0,n}}",
                                  offsets_[at]));
      }
      return false;
    }
    max = min;
    if (j < cps_.size() && cps_[j] == ',') {
      ++j;
      if (!number(max)) max = kUnbounded;
    }
    if (j >= cps_.size() || cps_[j] != '}') return false;
    length = j + 1 - at;
    return true;
  }

  bool quantifier_next() const {
    if (at_end()) return false;
    const char32_t c = peek();
    if (c == '*' || c == '+' || c == '?') return true;
    int a, b;
    size_t len;
    return bounds_at(i_, a, b, len);
  }

  NodeId quantified(NodeId atom) {
    if (!quantifier_next()) return atom;
    int min = 0, max = kUnbounded;
    const char32_t c = peek();
    if (c == '*') {
      ++i_;
    } else if (c == '+') {
      min = 1, ++i_;
    } else if (c == '?') {
      max = 1, ++i_;
    } else {
      size_t len = 0;
      bounds_at(i_, min, max, len);
      const int limit = ast_.limits().max_repeat;
      if (min > limit || max > limit) error(fmt::format("a repetition bound above the limit of {}", limit));
      if (max != kUnbounded && max < min) error("a repetition {m,n} with n < m");
      i_ += len;
    }
    if (!at_end() && peek() == '+') unsupported("a possessive quantifier");
    if (!at_end() && peek() == '?') ++i_;  // lazy: the same language under a full match
    if (quantifier_next()) error("multiple repeat (a quantifier after a quantifier)");
    return ast_.repeat(atom, min, max);
  }

  NodeId atom(int depth) {
    const char32_t c = peek();
    switch (c) {
      case '(':
        return group(depth);
      case '[':
        return ast_.chars(char_class());
      case '.':
        ++i_;
        return ast_.chars(dot_set());
      case '*':
      case '+':
      case '?':
        error("nothing to repeat");
      case '\\': {
        CodeSet set;
        escape(set, false);
        return ast_.chars(std::move(set));
      }
      case '{': {
        int a, b;
        size_t len;
        if (bounds_at(i_, a, b, len)) error("nothing to repeat");
        ++i_;
        return ast_.chars(CodeSet::of('{'));
      }
      default:
        ++i_;
        return ast_.chars(CodeSet::of(c));
    }
  }

  NodeId group(int depth) {
    ++i_;  // '('
    if (peek() == '?') {
      const char32_t k = peek(1);
      if (k == ':') {
        i_ += 2;
      } else if (k == 'P' && peek(2) == '<') {
        i_ += 3;
        group_name();
      } else if (k == '<' && peek(2) != '=' && peek(2) != '!') {
        i_ += 2;
        group_name();
      } else if (k == 'P' && peek(2) == '=') {
        unsupported("a named backreference (?P=name)");
      } else if (k == '=' || k == '!') {
        unsupported("lookahead (?= or (?!");
      } else if (k == '<') {
        unsupported("lookbehind (?<= or (?<!");
      } else if (k == '>') {
        unsupported("an atomic group (?>");
      } else if (k == '#') {
        unsupported("a comment group (?#");
      } else if (k == '(') {
        unsupported("a conditional group (?(");
      } else {
        unsupported("inline flags or another (? group");
      }
    }
    const NodeId inner = alternation(depth + 1);
    if (at_end() || peek() != ')') error("missing ')'");
    ++i_;
    return inner;
  }

  void group_name() {
    const size_t begin = i_;
    while (!at_end() && peek() != '>') {
      const char32_t c = peek();
      if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i_ > begin && is_digit(c))))
        error("a bad group name");
      ++i_;
    }
    if (at_end() || i_ == begin) error("a bad group name");
    ++i_;  // '>'
  }

  char32_t hex_digits(int count) {
    char32_t v = 0;
    for (int n = 0; n < count; ++n) {
      if (at_end() || !is_hex(peek())) error(fmt::format("an escape needs {} hex digits", count));
      v = v * 16 + static_cast<char32_t>(hex_value(peek()));
      ++i_;
    }
    return v;
  }

  char32_t scalar(char32_t v) {
    if (v > kMaxCodePoint) error("a code point above U+10FFFF");
    if (v >= 0xD800 && v <= 0xDFFF) error("a lone surrogate escape");
    return v;
  }

  // \u escape after the 'u': 4 hex digits (a surrogate pair as two escapes), or {hex}.
  char32_t unicode_escape() {
    if (peek() == '{') {
      ++i_;
      char32_t v = 0;
      int n = 0;
      while (!at_end() && is_hex(peek()) && n < 8) {
        v = v * 16 + static_cast<char32_t>(hex_value(peek()));
        ++i_, ++n;
      }
      if (n == 0 || at_end() || peek() != '}') error("a bad \\u{...} escape");
      ++i_;
      return scalar(v);
    }
    const char32_t v = hex_digits(4);
    if (v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
      const size_t save = i_;
      i_ += 2;
      const char32_t low = hex_digits(4);
      if (low >= 0xDC00 && low <= 0xDFFF) return 0x10000 + ((v - 0xD800) << 10) + (low - 0xDC00);
      i_ = save;
    }
    return scalar(v);
  }

  // An escape at i_ ('\\'): adds what it matches to `set`. Returns true when it was a single code point.
  bool escape(CodeSet& set, bool in_class) {
    ++i_;
    if (at_end()) error("a trailing backslash");
    const char32_t c = peek();
    ++i_;
    auto one = [&](char32_t v) {
      set.add(v);
      return true;
    };
    switch (c) {
      case 'd':
        set.add(digit_set());
        return false;
      case 'D':
        set.add(digit_set().complement());
        return false;
      case 'w':
        set.add(word_set());
        return false;
      case 'W':
        set.add(word_set().complement());
        return false;
      case 's':
        set.add(regex_space_set());
        return false;
      case 'S':
        set.add(regex_space_set().complement());
        return false;
      case 't':
        return one('\t');
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case 'x':
        return one(hex_digits(2));
      case 'u':
        return one(unicode_escape());
      case 'U':
        return one(scalar(hex_digits(8)));
      case '0':
        if (!at_end() && is_digit(peek())) unsupported("an octal escape");
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        --i_;
        unsupported("the word boundary \\b");
      case 'B':
        --i_, unsupported("the non-boundary \\B");
      case 'A':
      case 'Z':
      case 'z':
        --i_;
        unsupported(in_class ? "an anchor escape inside a class" : "an anchor escape inside the pattern");
      case 'p':
      case 'P':
        --i_, unsupported("a Unicode property escape \\p / \\P");
      case 'k':
        --i_, unsupported("a named backreference \\k");
      case 'c':
        --i_, unsupported("a control escape \\c");
      case 'N':
        --i_, unsupported("a named character escape \\N");
      default:
        break;
    }
    if (c >= '1' && c <= '9') {
      --i_;
      unsupported("a backreference \\1..\\9");
    }
    if (c < 0x80 && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
      --i_;
      error(fmt::format("an unknown escape \\{}", static_cast<char>(c)));
    }
    return one(c);  // escaped punctuation or any non-ASCII code point stands for itself
  }

  CodeSet char_class() {
    ++i_;  // '['
    bool negate = false;
    if (peek() == '^') negate = true, ++i_;
    CodeSet set;
    bool first = true;
    while (true) {
      if (at_end()) error("an unterminated character class");
      char32_t c = peek();
      if (c == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      if (c == '[' && peek(1) == ':') unsupported("a POSIX class [:...:]");
      char32_t lo;
      if (c == '\\') {
        CodeSet item;
        if (!escape(item, true)) {
          if (peek() == '-' && has(1) && peek(1) != ']') error("a range with a class escape as an end");
          set.add(item);
          continue;
        }
        lo = item.ranges()[0].lo;
      } else {
        lo = c;
        ++i_;
      }
      if (peek() == '-' && has(1) && peek(1) != ']') {
        ++i_;
        char32_t hi;
        if (peek() == '\\') {
          CodeSet item;
          if (!escape(item, true)) error("a range with a class escape as an end");
          hi = item.ranges()[0].lo;
        } else {
          hi = peek();
          ++i_;
        }
        if (hi < lo) error("a class range out of order");
        set.add(lo, hi);
      } else {
        set.add(lo);
      }
    }
    return negate ? set.complement() : set;
  }

  Ast& ast_;
  std::vector<char32_t> cps_;
  std::vector<size_t> offsets_;
  size_t i_ = 0;
};

}  // namespace

CodeSet regex_space_set() {
  CodeSet s;
  for (char32_t c : {U'\t', U'\n', U'\v', U'\f', U'\r', U' ', U'\u00A0', U'\u1680', U'\u2028', U'\u2029',
                     U'\u202F', U'\u205F', U'\u3000', U'\uFEFF'})
    s.add(c);
  s.add(0x2000, 0x200A);
  return s;
}

NodeId parse_regex(Ast& ast, std::string_view pattern) {
  return Parser(ast, pattern).parse();
}

}  // namespace dgemma::guided
