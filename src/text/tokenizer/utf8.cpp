#include "text/tokenizer/utf8.h"

namespace dgemma::utf8 {
namespace {

// Allowed range of the second byte for each lead byte (Unicode Table 3-7); later bytes are 80..BF.
struct Lead {
  int len;
  unsigned char lo, hi;
};

Lead lead_info(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};  // 80..C1, F5..FF: never valid as a lead byte
}

}  // namespace

Decoded decode(std::string_view s, size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  const Lead lead = lead_info(b0);
  if (lead.len == 1) return {b0, 1, true};
  if (lead.len == 0) return {0xFFFD, 1, false};
  char32_t cp = b0 & (0x7F >> lead.len);
  for (int i = 1; i < lead.len; ++i) {
    if (pos + i >= s.size()) return {0xFFFD, i, false};
    const auto b = static_cast<unsigned char>(s[pos + i]);
    const unsigned char lo = i == 1 ? lead.lo : 0x80, hi = i == 1 ? lead.hi : 0xBF;
    if (b < lo || b > hi) return {0xFFFD, i, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, lead.len, true};
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    const Decoded d = decode(s, i);
    if (!d.valid) return false;
    i += d.len;
  }
  return true;
}

std::string sanitize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      out.push_back(static_cast<char>(b));
      ++i;
      continue;
    }
    const Decoded d = decode(s, i);
    if (d.valid)
      out.append(s.substr(i, d.len));
    else
      out.append(kReplacement);
    i += d.len;
  }
  return out;
}

void append(std::string& out, char32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace dgemma::utf8
