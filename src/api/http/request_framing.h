#pragma once
// HTTP/1.1 request framing: how much of a connection's buffered bytes is one whole request, or why the
// request is refused before a worker sees it. Pure (no sockets); the poller of http_connections.h runs
// it on every read.
#include <cstddef>
#include <string>
#include <string_view>

#include "api/http/http_connections.h"

namespace dgemma {

// How far a buffer holds one request (pure; see frame_request).
struct RequestFraming {
  enum class Kind { kIncomplete, kReady, kError } kind = Kind::kIncomplete;
  size_t skip = 0;     // empty lines before the request line (allowed between requests; dropped)
  size_t length = 0;   // kReady: bytes of the whole request when the body is known (0: body streamed)
  int status = 0;      // kError: the status to answer before closing
  std::string message; // kError: why
};

// Decides from the bytes buffered so far whether a request is complete. The body is waited for when
// Content-Length gives it; a chunked body or `Expect: 100-continue` hands the request over after its
// headers. Refused at once: a malformed or negative Content-Length (400), one above the body limit
// (413), Content-Length together with Transfer-Encoding (400), a transfer coding other than chunked
// (501), headers over the limit (431).
RequestFraming frame_request(std::string_view buffered, const ConnectionLimits& limits);

}  // namespace dgemma
