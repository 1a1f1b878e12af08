// Fuzz target for the connection poller's request framing (frame_request): untrusted bytes straight
// from the socket. Anything but a clean verdict is a bug. Invariants checked, abort() on violation:
//  - a verdict never changes as more bytes arrive (Ready keeps its length, an error stays an error
//    with the same status), so reading in any split gives the same answer;
//  - Ready lengths and skips lie inside the buffer; error statuses are 400, 413, 431 or 501.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "api/http/request_framing.h"

namespace {

using namespace dgemma;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_http_framing: invariant violated: %s\n", what);
  std::abort();
}

void check(const RequestFraming& f, size_t size) {
  if (f.skip > size) die("skip past the buffer");
  if (f.kind == RequestFraming::Kind::kReady && f.length > size - f.skip) die("length past the buffer");
  if (f.kind == RequestFraming::Kind::kError && f.status != 400 && f.status != 413 && f.status != 431 && f.status != 501)
    die("unexpected status");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ConnectionLimits limits;
  limits.max_header_bytes = 512;
  limits.max_body_bytes = 256;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const RequestFraming whole = frame_request(all, limits);
  check(whole, size);
  // Every prefix that already has a verdict must agree with the whole buffer's.
  for (size_t n = 0; n <= size; n += 1 + n / 8) {
    const RequestFraming part = frame_request(all.substr(0, n), limits);
    check(part, n);
    if (part.kind == RequestFraming::Kind::kReady) {
      if (whole.kind != RequestFraming::Kind::kReady || whole.length != part.length || whole.skip != part.skip)
        die("a ready request changed with more bytes");
    } else if (part.kind == RequestFraming::Kind::kError) {
      if (whole.kind != RequestFraming::Kind::kError || whole.status != part.status) die("an error changed with more bytes");
    }
  }
  return 0;
}
