#pragma once
// UTF-8 helpers for the text layer: strict validation (no overlongs, surrogates or code points past
// U+10FFFF) and repair of untrusted bytes with U+FFFD, one per "maximal subpart" of an ill-formed
// sequence (Unicode 15 §3.9, U+FFFD substitution of maximal subparts; what Python's
// bytes.decode(errors="replace") and WHATWG decoders do).
#include <cstddef>
#include <string>
#include <string_view>

namespace dgemma::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

struct Decoded {
  char32_t cp;  // the code point, or U+FFFD when !valid
  int len;      // bytes consumed: the sequence length, or the maximal ill-formed subpart (>= 1)
  bool valid;
};

// Decodes the sequence starting at s[pos] (pos < s.size()).
Decoded decode(std::string_view s, size_t pos);

bool is_valid(std::string_view s);

// Returns `s` with every ill-formed subsequence replaced by U+FFFD.
std::string sanitize(std::string_view s);

void append(std::string& out, char32_t cp);

}  // namespace dgemma::utf8
