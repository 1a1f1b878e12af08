#include "image/data_url.h"

#include <algorithm>
#include <array>
#include <cctype>

#include "util/error.h"

namespace dgemma {
namespace {

constexpr std::array<int8_t, 256> make_alphabet() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  const char* chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(chars[i])] = static_cast<int8_t>(i);
  return t;
}
constexpr std::array<int8_t, 256> kAlphabet = make_alphabet();

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

std::vector<uint8_t> decode_base64_strict(std::string_view text, size_t max_bytes) {
  if (text.size() % 4 != 0)
    fail_arg("invalid base64 data: its length ({} characters) is not a multiple of 4 (incorrect padding)",
             text.size());
  size_t pad = 0;
  if (!text.empty() && text.back() == '=') pad = text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1;
  const size_t n = text.size() / 4 * 3 - pad;
  if (n > max_bytes) fail_arg("the image is {} bytes, over the limit of {} bytes", n, max_bytes);
  std::vector<uint8_t> out;
  out.reserve(n);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    uint32_t v = 0;
    for (size_t j = 0; j < 4; ++j) {
      const unsigned char c = static_cast<unsigned char>(text[i + j]);
      int d = kAlphabet[c];
      if (c == '=' && last && j >= 4 - pad)
        d = 0;
      else if (d < 0)
        fail_arg(
            "invalid base64 data: character {} at offset {} is not in the base64 alphabet",
            c >= 0x20 && c < 0x7f ? fmt::format("'{}'", static_cast<char>(c)) : fmt::format("0x{:02x}", c),
            i + j);
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out.push_back(static_cast<uint8_t>(v >> 16));
    if (!(last && pad == 2)) out.push_back(static_cast<uint8_t>(v >> 8));
    if (!(last && pad >= 1)) out.push_back(static_cast<uint8_t>(v));
  }
  return out;
}

DataUrl parse_data_url(std::string_view url, size_t max_bytes) {
  if (url.size() < 5 || lower(url.substr(0, 5)) != "data:") fail_arg("not a data: URL");
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) fail_arg("invalid data: URL: no ',' before the data");
  const std::string_view spec = url.substr(5, comma - 5);
  const size_t semi = spec.find(';');
  DataUrl out;
  out.media_type = lower(spec.substr(0, semi));
  bool base64 = false;
  for (size_t at = semi; at != std::string_view::npos;) {
    const size_t next = spec.find(';', at + 1);
    const std::string param =
        lower(spec.substr(at + 1, next == std::string_view::npos ? next : next - at - 1));
    if (param == "base64") base64 = true;
    at = next;
  }
  if (!base64) fail_arg("data: URLs must be base64-encoded (';base64,')");
  if (!out.media_type.empty() && out.media_type.rfind("image/", 0) != 0)
    fail_arg("data: URL media type '{}' is not an image type", out.media_type);
  out.bytes = decode_base64_strict(url.substr(comma + 1), max_bytes);
  return out;
}

}  // namespace dgemma
