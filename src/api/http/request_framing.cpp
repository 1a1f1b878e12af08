#include "api/http/request_framing.h"

#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "util/error.h"

namespace dgemma {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Client bytes quoted in a message: bounded, control characters replaced.
std::string printable(std::string_view v) {
  std::string out(v.substr(0, 40));
  for (char& ch : out)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return out;
}

}  // namespace

RequestFraming frame_request(std::string_view buf, const ConnectionLimits& limits) {
  RequestFraming f;
  while (f.skip < buf.size() && (buf[f.skip] == '\r' || buf[f.skip] == '\n')) ++f.skip;
  buf.remove_prefix(f.skip);
  auto error = [&](int status, std::string message) {
    f.kind = RequestFraming::Kind::kError;
    f.status = status;
    f.message = std::move(message);
    return f;
  };
  // The header block ends at the first empty line (lines end in LF, optionally CR LF).
  size_t pos = 0, header_end = std::string_view::npos;
  std::vector<std::string_view> lines;
  while (pos < buf.size()) {
    const size_t nl = buf.find('\n', pos);
    if (nl == std::string_view::npos) break;
    std::string_view line = buf.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = nl + 1;
    if (line.empty()) {
      header_end = pos;
      break;
    }
    lines.push_back(line);
  }
  if (header_end == std::string_view::npos) {
    if (buf.size() > limits.max_header_bytes)
      return error(431, fmt::format("Request headers larger than {} bytes", limits.max_header_bytes));
    return f;
  }
  if (header_end > limits.max_header_bytes)
    return error(431, fmt::format("Request headers larger than {} bytes", limits.max_header_bytes));
  std::optional<uint64_t> content_length;
  bool chunked = false, expect_continue = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string_view line = lines[i];
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return error(400, "Malformed header line");
    const std::string_view name = line.substr(0, colon);
    if (name.find_first_of(" \t") != std::string_view::npos)
      return error(400, "Whitespace before the colon of a header name");
    const std::string_view value = trim(line.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      if (value.empty() || value.size() > 18 || value.find_first_not_of("0123456789") != std::string_view::npos)
        return error(400, fmt::format("Invalid Content-Length '{}'", printable(value)));
      const uint64_t v = std::stoull(std::string(value));
      if (content_length && *content_length != v) return error(400, "Conflicting Content-Length headers");
      content_length = v;
    } else if (iequals(name, "Transfer-Encoding")) {
      if (!iequals(value, "chunked"))
        return error(501, fmt::format("Transfer-Encoding '{}' is not supported (only chunked)", printable(value)));
      chunked = true;
    } else if (iequals(name, "Expect")) {
      expect_continue = iequals(value, "100-continue");
    }
  }
  if (chunked && content_length) return error(400, "Content-Length together with Transfer-Encoding");
  if (content_length && *content_length > limits.max_body_bytes)
    return error(413, fmt::format("Request body too large (limit {} bytes)", limits.max_body_bytes));
  f.kind = RequestFraming::Kind::kReady;
  if (chunked || (expect_continue && content_length.value_or(0) > 0)) return f;  // the worker reads the body
  const uint64_t total = header_end + content_length.value_or(0);
  if (buf.size() < total) {
    f.kind = RequestFraming::Kind::kIncomplete;
    return f;
  }
  f.length = total;
  return f;
}

}  // namespace dgemma
