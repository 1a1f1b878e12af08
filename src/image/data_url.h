#pragma once
// data: URLs as image sources (RFC 2397), as the reference's server accepts them: only the base64 form,
// decoded strictly (the standard alphabet, '=' padding to a multiple of 4 characters, nothing else, no
// whitespace). The media type is returned but not trusted: decoding sniffs the bytes (image_decode.h).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dgemma {

struct DataUrl {
  std::string media_type;  // e.g. "image/png" (lower-cased; may be empty)
  std::vector<uint8_t> bytes;
};

// Throws Error(kInvalidArgument) naming the problem: not a data: URL, not base64, invalid base64, or
// more than max_bytes once decoded (checked before decoding).
DataUrl parse_data_url(std::string_view url, size_t max_bytes);

// Strict base64 (see above); throws Error(kInvalidArgument) on any deviation or past max_bytes.
std::vector<uint8_t> decode_base64_strict(std::string_view text, size_t max_bytes);

}  // namespace dgemma
