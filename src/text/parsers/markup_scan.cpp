#include "text/parsers/markup_scan.h"

namespace dgemma::markup {

std::string render(std::string_view markup_text, bool keep_literal) {
  std::string out;
  out.reserve(markup_text.size());
  for (char c : markup_text) {
    if (!is_markup_byte(c)) {
      out += c;
      continue;
    }
    if (!keep_literal) continue;
    for (const MarkupToken& t : kMarkupTokens)
      if (t.code[0] == c) out += t.literal;
  }
  return out;
}

std::string from_literal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const MarkupToken* hit = nullptr;
    if (text[i] == '<')
      for (const MarkupToken& t : kMarkupTokens)
        if (text.substr(i, t.literal.size()) == t.literal) hit = &t;
    if (hit) {
      out += hit->code;
      i += hit->literal.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

Match match_at(std::string_view text, size_t pos, std::string_view marker) {
  if (pos >= text.size()) return Match::kNone;
  std::string_view rest = text.substr(pos);
  if (rest.size() >= marker.size()) return rest.substr(0, marker.size()) == marker ? Match::kFull : Match::kNone;
  return marker.substr(0, rest.size()) == rest ? Match::kPartial : Match::kNone;
}

Match match_any(std::string_view text, size_t pos, std::initializer_list<std::string_view> markers,
                std::string_view* which) {
  Match best = Match::kNone;
  for (std::string_view m : markers) {
    Match r = match_at(text, pos, m);
    if (r == Match::kFull) {
      if (which) *which = m;
      return Match::kFull;
    }
    if (r == Match::kPartial) best = Match::kPartial;
  }
  return best;
}

size_t find_marker(std::string_view text, size_t from, std::initializer_list<std::string_view> markers,
                   Match* result, std::string_view* which) {
  // Markers start with '<' or are markup bytes, so only those positions need a closer look.
  static constexpr std::string_view kFirst = "<\xF8\xF9\xFA\xFB\xFC\xFD";
  for (size_t i = text.find_first_of(kFirst, from); i != std::string_view::npos;
       i = text.find_first_of(kFirst, i + 1)) {
    Match r = match_any(text, i, markers, which);
    if (r != Match::kNone) {
      *result = r;
      return i;
    }
  }
  *result = Match::kNone;
  return text.size();
}

int utf8_sequence(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  if (c < 0x80) return 1;
  int len;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;        // overlong
    if (c == 0xED) hi = 0x9F;        // UTF-16 surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;        // overlong
    if (c == 0xF4) hi = 0x8F;        // > U+10FFFF
  } else {
    return -1;
  }
  for (int k = 1; k < len; ++k) {
    if (i + k >= s.size()) return 0;
    const unsigned x = b(i + k);
    if (k == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return -1;
  }
  return len;
}

size_t utf8_incomplete_tail(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if (c < 0x80) return 0;
    if (c >= 0xC0) return utf8_sequence(s, n - back) == 0 ? back : 0;  // a lead byte
  }
  return 0;
}

void append_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t append_json_escaped(std::string& out, std::string_view raw, bool final) {
  static constexpr char kHex[] = "0123456789abcdef";
  size_t i = 0;
  while (i < raw.size()) {
    const unsigned char c = static_cast<unsigned char>(raw[i]);
    if (is_markup_byte(raw[i])) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      const int len = utf8_sequence(raw, i);
      if (len > 0) {
        out.append(raw.substr(i, static_cast<size_t>(len)));
        i += static_cast<size_t>(len);
      } else if (len == 0 && !final) {
        return i;  // incomplete character at the end: wait for the rest
      } else {
        out += "\xEF\xBF\xBD";  // U+FFFD for an invalid or truncated sequence, one per bad byte
        ++i;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  return i;
}

std::string json_quote(std::string_view raw) {
  std::string out = "\"";
  append_json_escaped(out, raw, true);
  out += '"';
  return out;
}

}  // namespace dgemma::markup
