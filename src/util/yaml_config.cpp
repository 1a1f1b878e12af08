#include "util/yaml_config.h"

#include <charconv>
#include <string>
#include <vector>

#include "util/error.h"

namespace dgemma {
namespace {

constexpr int kMaxDepth = 64;

struct Line {
  int no = 0;        // 1-based line number
  int indent = 0;    // leading spaces
  std::string text;  // without indentation, comment and trailing spaces
  std::string raw;   // the whole line (block scalars keep it)
};

bool is_space(char c) {
  return c == ' ' || c == '\t';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && (is_space(s.back()) || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

class Reader {
 public:
  Reader(std::string_view text, std::string_view what) : what_(what) {
    int no = 0;
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      std::string_view raw = text.substr(start, end - start);
      if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
      ++no;
      Line l;
      l.no = no;
      l.raw.assign(raw);
      size_t k = 0;
      while (k < raw.size() && raw[k] == ' ') ++k;
      l.indent = static_cast<int>(k);
      l.text.assign(trim(strip_comment(raw.substr(k))));
      if (!l.text.empty() && raw[k] == '\t') fail(no, "a tab in the indentation (use spaces)");
      lines_.push_back(std::move(l));
      if (end == text.size()) break;
      start = end + 1;
    }
  }

  Json document() {
    skip_blank();
    if (i_ < lines_.size() && lines_[i_].indent == 0 && lines_[i_].text == "---") {
      ++i_;
      skip_blank();
    }
    if (i_ >= lines_.size()) return Json::object();
    const Line& first = lines_[i_];
    if (first.indent != 0) fail(first.no, "the top level must start at column 1");
    if (is_sequence_item(first.text)) fail(first.no, "the top level must be a mapping of flag: value");
    Json out = mapping(0, 0);
    skip_blank();
    if (i_ < lines_.size()) {
      const Line& l = lines_[i_];
      if (l.indent == 0 && (l.text == "---" || l.text == "...")) {
        ++i_;
        skip_blank();
        if (l.text == "---" || i_ < lines_.size()) fail(l.no, "only one YAML document is supported");
      } else {
        fail(l.no, "unexpected indentation");
      }
    }
    if (!out.is_object()) fail(first.no, "the top level must be a mapping of flag: value");
    return out;
  }

 private:
  [[noreturn]] void fail(int line, std::string_view why) const {
    throw Error(ErrorKind::kInvalidArgument, fmt::format("{} line {}: {}", what_, line, why));
  }

  // The text before a comment: '#' at the start or after a space, outside quotes.
  static std::string_view strip_comment(std::string_view s) {
    char quote = 0;
    for (size_t k = 0; k < s.size(); ++k) {
      const char c = s[k];
      if (quote) {
        if (c == '\\' && quote == '"')
          ++k;
        else if (c == quote)
          quote = 0;
      } else if (c == '"' || c == '\'') {
        if (k == 0 || is_space(s[k - 1]) || s[k - 1] == ':' || s[k - 1] == '[' || s[k - 1] == '{' ||
            s[k - 1] == ',' || s[k - 1] == '-')
          quote = c;
      } else if (c == '#' && (k == 0 || is_space(s[k - 1]))) {
        return s.substr(0, k);
      }
    }
    return s;
  }

  static bool is_sequence_item(std::string_view t) { return t == "-" || t.starts_with("- "); }

  void skip_blank() {
    while (i_ < lines_.size() && lines_[i_].text.empty()) ++i_;
  }

  void check_depth(int depth, int line) const {
    if (depth > kMaxDepth) fail(line, fmt::format("nesting deeper than {} levels", kMaxDepth));
  }

  // The position of the ':' that ends a mapping key in t (followed by a space or the end), outside
  // quotes and brackets; npos when t is not "key: value".
  static size_t key_colon(std::string_view t) {
    char quote = 0;
    int brackets = 0;
    for (size_t k = 0; k < t.size(); ++k) {
      const char c = t[k];
      if (quote) {
        if (c == '\\' && quote == '"')
          ++k;
        else if (c == quote)
          quote = 0;
        continue;
      }
      if ((c == '"' || c == '\'') && k == 0)
        quote = c;
      else if (c == '[' || c == '{')
        ++brackets;
      else if (c == ']' || c == '}')
        --brackets;
      else if (c == ':' && brackets == 0 && (k + 1 == t.size() || is_space(t[k + 1])))
        return k;
    }
    return std::string_view::npos;
  }

  std::string key_of(std::string_view k, int line) {
    k = trim(k);
    if (k.empty()) fail(line, "an empty key");
    if (k.front() == '"' || k.front() == '\'') {
      std::string_view rest = k;
      std::string key = quoted(rest, line);
      if (!trim(rest).empty()) fail(line, "text after a quoted key");
      return key;
    }
    if (k.front() == '?' || k.front() == '[' || k.front() == '{' || k.front() == '&' || k.front() == '*' ||
        k.front() == '!')
      fail(line, "complex keys, anchors, aliases and tags are not supported");
    return std::string(k);
  }

  Json mapping(int indent, int depth) {
    check_depth(depth, lines_[i_].no);
    Json out = Json::object();
    for (;;) {
      skip_blank();
      if (i_ >= lines_.size()) break;
      const Line& l = lines_[i_];
      if (l.indent < indent || (l.indent == 0 && (l.text == "---" || l.text == "..."))) break;
      if (l.indent > indent) fail(l.no, "unexpected indentation");
      if (is_sequence_item(l.text)) {
        if (indent == 0) fail(l.no, "a list item where a key was expected");
        break;  // a sequence at the parent key's indentation ends this mapping
      }
      const size_t colon = key_colon(l.text);
      if (colon == std::string_view::npos) fail(l.no, "expected 'key: value'");
      const int no = l.no;
      std::string key = key_of(std::string_view(l.text).substr(0, colon), no);
      if (out.contains(key)) fail(no, fmt::format("the key '{}' appears twice", key));
      const std::string rest(trim(std::string_view(l.text).substr(colon + 1)));
      ++i_;
      out[key] = value(rest, indent, no, depth, /*key_value=*/true);
    }
    return out;
  }

  Json sequence(int indent, int depth) {
    check_depth(depth, lines_[i_].no);
    Json out = Json::array();
    for (;;) {
      skip_blank();
      if (i_ >= lines_.size()) break;
      Line& l = lines_[i_];
      if (l.indent < indent || !is_sequence_item(l.text)) break;
      if (l.indent > indent) fail(l.no, "unexpected indentation");
      const int no = l.no;
      const std::string rest(trim(std::string_view(l.text).substr(1)));
      if (!rest.empty() && rest.front() != '"' && rest.front() != '\'' && rest.front() != '[' &&
          rest.front() != '{' && key_colon(rest) != std::string_view::npos) {
        // "- key: value": a mapping whose keys line up with this first one.
        const size_t offset = l.text.find(rest);
        l.indent += static_cast<int>(offset);
        l.text = rest;
        out.push_back(mapping(l.indent, depth + 1));
        continue;
      }
      ++i_;
      out.push_back(value(rest, indent, no, depth, /*key_value=*/false));
    }
    return out;
  }

  // The value that follows "key:" or "- " on line `no` (text `rest`), whose key or dash is at `indent`.
  Json value(const std::string& rest, int indent, int no, int depth, bool key_value) {
    if (rest.empty()) {
      skip_blank();
      if (i_ >= lines_.size()) return nullptr;
      const Line& next = lines_[i_];
      if (next.indent > indent) {
        return is_sequence_item(next.text) ? sequence(next.indent, depth + 1)
                                           : mapping(next.indent, depth + 1);
      }
      if (key_value && next.indent == indent && is_sequence_item(next.text))
        return sequence(indent, depth + 1);
      return nullptr;
    }
    const char c = rest.front();
    if (c == '&' || c == '*' || c == '!') fail(no, "anchors, aliases and tags are not supported");
    if (c == '|' || c == '>') return block_scalar(rest, indent, no);
    if (c == '[' || c == '{') {
      std::string text = rest;
      // A flow collection may run over the following lines (more indented than its key).
      while (!balanced(text)) {
        if (i_ >= lines_.size() || (lines_[i_].indent <= indent && !lines_[i_].text.empty()))
          fail(no, "an unterminated [ or {");
        text += ' ';
        text += lines_[i_].text;
        ++i_;
      }
      std::string_view s = text;
      Json v = flow(s, no, depth + 1);
      if (!trim(s).empty()) fail(no, "text after a closed [ or {");
      return v;
    }
    if (c == '"' || c == '\'') {
      std::string_view s = rest;
      Json v = quoted(s, no);
      if (!trim(s).empty()) fail(no, "text after a quoted value");
      return v;
    }
    if (key_value && key_colon(rest) != std::string_view::npos)
      fail(no, "a mapping must start on its own line");
    return plain(rest);
  }

  // True when every [ and { outside quotes is closed.
  static bool balanced(std::string_view t) {
    int open = 0;
    char quote = 0;
    for (size_t k = 0; k < t.size(); ++k) {
      const char c = t[k];
      if (quote) {
        if (c == '\\' && quote == '"')
          ++k;
        else if (c == quote)
          quote = 0;
      } else if (c == '"' || c == '\'') {
        quote = c;
      } else if (c == '[' || c == '{') {
        ++open;
      } else if (c == ']' || c == '}') {
        if (--open == 0) return true;
      }
    }
    return open <= 0;
  }

  Json block_scalar(const std::string& header, int indent, int no) {
    const bool folded = header[0] == '>';
    char chomp = 0;
    for (size_t k = 1; k < header.size(); ++k) {
      if ((header[k] == '-' || header[k] == '+') && !chomp)
        chomp = header[k];
      else
        fail(no, "block scalar headers other than |, |-, |+, >, >-, >+ are not supported");
    }
    std::vector<std::string> body;
    int content_indent = -1;
    while (i_ < lines_.size()) {
      const Line& l = lines_[i_];
      const bool blank = trim(l.raw).empty();
      if (!blank && l.indent <= indent) break;
      if (!blank && content_indent < 0) content_indent = l.indent;
      if (!blank && l.indent < content_indent)
        fail(l.no, "a block scalar line less indented than its first line");
      body.push_back(blank ? std::string() : l.raw.substr(static_cast<size_t>(content_indent)));
      ++i_;
    }
    size_t trailing = 0;
    while (!body.empty() && body.back().empty()) {
      body.pop_back();
      ++trailing;
    }
    std::string out;
    for (size_t k = 0; k < body.size(); ++k) {
      if (!folded) {
        if (k > 0) out += '\n';
        out += body[k];
      } else if (body[k].empty()) {
        out += '\n';  // a blank line in folded text is a line break
      } else {
        if (k > 0 && !body[k - 1].empty()) out += ' ';
        out += body[k];
      }
    }
    if (chomp != '-' && !body.empty()) out += '\n';
    if (chomp == '+')
      for (size_t k = 0; k < trailing; ++k) out += '\n';
    return out;
  }

  // A quoted scalar at the start of s; s is left after its closing quote.
  std::string quoted(std::string_view& s, int no) {
    const char q = s.front();
    std::string out;
    size_t k = 1;
    for (;; ++k) {
      if (k >= s.size()) fail(no, "an unterminated quoted string");
      const char c = s[k];
      if (q == '\'') {
        if (c == '\'') {
          if (k + 1 < s.size() && s[k + 1] == '\'') {
            out += '\'';
            ++k;
            continue;
          }
          break;
        }
        out += c;
        continue;
      }
      if (c == '"') break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++k >= s.size()) fail(no, "an unterminated quoted string");
      switch (s[k]) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case '0':
          out += '\0';
          break;
        case 'u': {
          unsigned cp = 0;
          if (k + 4 >= s.size() ||
              std::from_chars(s.data() + k + 1, s.data() + k + 5, cp, 16).ptr != s.data() + k + 5)
            fail(no, "a bad \\u escape");
          if (cp >= 0xD800 && cp <= 0xDFFF) fail(no, "a \\u escape of a surrogate");
          k += 4;
          append_utf8(out, cp);
          break;
        }
        default:
          fail(no, fmt::format("an unknown escape \\{}", s[k]));
      }
    }
    s.remove_prefix(k + 1);
    return out;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  static Json plain(std::string_view t) {
    t = trim(t);
    if (t.empty() || t == "~" || t == "null" || t == "Null" || t == "NULL") return nullptr;
    for (std::string_view v : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})
      if (t == v) return true;
    for (std::string_view v : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"})
      if (t == v) return false;
    size_t k = t[0] == '-' || t[0] == '+' ? 1 : 0;
    const size_t digits_from = k;
    while (k < t.size() && t[k] >= '0' && t[k] <= '9') ++k;
    const size_t int_digits = k - digits_from;
    if (k == t.size() && int_digits > 0) {
      int64_t v = 0;
      const char* end = t.data() + t.size();
      const auto r = std::from_chars(t.data() + (t[0] == '+' ? 1 : 0), end, v);
      if (r.ec == std::errc() && r.ptr == end) return v;
      return std::string(t);
    }
    if (k < t.size() && t[k] == '.') {
      ++k;
      const size_t frac_from = k;
      while (k < t.size() && t[k] >= '0' && t[k] <= '9') ++k;
      const bool any = int_digits > 0 || k > frac_from;
      if (any && k < t.size() && (t[k] == 'e' || t[k] == 'E')) {
        size_t e = k + 1;
        if (e < t.size() && (t[e] == '-' || t[e] == '+')) ++e;
        const size_t exp_from = e;
        while (e < t.size() && t[e] >= '0' && t[e] <= '9') ++e;
        if (e > exp_from) k = e;
      }
      if (any && k == t.size()) {
        double v = 0;
        const char* end = t.data() + t.size();
        const auto r = std::from_chars(t.data() + (t[0] == '+' ? 1 : 0), end, v);
        if (r.ec == std::errc() && r.ptr == end) return v;
      }
    }
    return std::string(t);
  }

  // A flow collection ([...] or {...}) or a scalar inside one, at the start of s; s is left after it.
  Json flow(std::string_view& s, int no, int depth) {
    check_depth(depth, no);
    s = trim(s);
    if (s.empty()) fail(no, "a missing value in a [ ] or { }");
    const char c = s.front();
    if (c == '"' || c == '\'') return quoted(s, no);
    if (c == '&' || c == '*' || c == '!') fail(no, "anchors, aliases and tags are not supported");
    if (c != '[' && c != '{') {
      // A plain scalar runs to the next ',', ']' or '}'.
      size_t k = 0;
      while (k < s.size() && s[k] != ',' && s[k] != ']' && s[k] != '}') ++k;
      Json v = plain(s.substr(0, k));
      s.remove_prefix(k);
      return v;
    }
    const bool is_map = c == '{';
    const char close = is_map ? '}' : ']';
    Json out = is_map ? Json::object() : Json::array();
    s.remove_prefix(1);
    for (;;) {
      s = trim(s);
      if (s.empty()) fail(no, "an unterminated [ or {");
      if (s.front() == close) {
        s.remove_prefix(1);
        return out;
      }
      if (s.front() == ',') fail(no, "an empty entry in a [ ] or { }");
      if (is_map) {
        std::string key;
        if (s.front() == '"' || s.front() == '\'') {
          key = quoted(s, no);
        } else {
          size_t k = 0;
          while (k < s.size() && s[k] != ':' && s[k] != ',' && s[k] != '}') ++k;
          key.assign(trim(s.substr(0, k)));
          if (key.empty()) fail(no, "an empty key in { }");
          s.remove_prefix(k);
        }
        s = trim(s);
        Json v = nullptr;
        if (!s.empty() && s.front() == ':') {
          s.remove_prefix(1);
          s = trim(s);
          if (s.empty() || (s.front() != ',' && s.front() != '}')) v = flow(s, no, depth + 1);
        }
        if (out.contains(key)) fail(no, fmt::format("the key '{}' appears twice", key));
        out[key] = std::move(v);
      } else {
        out.push_back(flow(s, no, depth + 1));
      }
      s = trim(s);
      if (s.empty()) fail(no, "an unterminated [ or {");
      if (s.front() == ',')
        s.remove_prefix(1);
      else if (s.front() != close)
        fail(no, fmt::format("expected ',' or '{}'", close));
    }
  }

  std::string_view what_;
  std::vector<Line> lines_;
  size_t i_ = 0;
};

}  // namespace

Json parse_yaml_config(std::string_view text, std::string_view what) {
  return Reader(text, what).document();
}

}  // namespace dgemma
