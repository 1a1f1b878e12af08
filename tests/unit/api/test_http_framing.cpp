// Request framing in the connection poller: when a buffered request is complete, and which framing
// errors are answered before any worker sees the request.
#include <gtest/gtest.h>

#include <string>

#include "api/http/request_framing.h"

namespace dgemma {
namespace {

using Kind = RequestFraming::Kind;

RequestFraming frame(const std::string& s, size_t max_body = 1000) {
  ConnectionLimits l;
  l.max_body_bytes = max_body;
  l.max_header_bytes = 256;
  return frame_request(s, l);
}

TEST(HttpFraming, CompleteWhenHeadersAndContentLengthBodyArrived) {
  const std::string head = "POST /x HTTP/1.1\r\nHost: a\r\ncontent-length: 5\r\n\r\n";
  EXPECT_EQ(frame("POST /x HTTP/1.1\r\nHost: a").kind, Kind::kIncomplete);
  EXPECT_EQ(frame(head + "abc").kind, Kind::kIncomplete);
  const RequestFraming f = frame(head + "abcdeGET /next HTTP/1.1\r\n");  // a pipelined request follows
  EXPECT_EQ(f.kind, Kind::kReady);
  EXPECT_EQ(f.length, head.size() + 5);
  EXPECT_EQ(frame("GET / HTTP/1.1\n\n").kind, Kind::kReady);  // bare LF line ends
}

TEST(HttpFraming, EmptyLinesBeforeARequestAreSkipped) {
  const RequestFraming f = frame("\r\n\r\nGET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(f.kind, Kind::kReady);
  EXPECT_EQ(f.skip, 4u);
  EXPECT_EQ(f.length, 18u);
}

TEST(HttpFraming, ChunkedAndExpectContinueAreHandedOverAfterTheHeaders) {
  EXPECT_EQ(frame("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").kind, Kind::kReady);
  EXPECT_EQ(frame("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n").length, 0u);
  EXPECT_EQ(frame("POST / HTTP/1.1\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n").kind, Kind::kReady);
}

TEST(HttpFraming, BadFramingIsRefusedAtOnce) {
  struct Case {
    std::string text;
    int status;
  };
  for (const Case& c : std::vector<Case>{
           {"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400},
           {"POST / HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n", 400},
           {"POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", 400},
           {"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400},
           {"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
           {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
           {"POST / HTTP/1.1\r\nContent-Length : 3\r\n\r\n", 400},
           {"POST / HTTP/1.1\r\nno colon here\r\n\r\n", 400},
           {"POST / HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", 413},
           {"GET / HTTP/1.1\r\nX: " + std::string(300, 'a') + "\r\n\r\n", 431},
           {"GET / HTTP/1.1\r\nX: " + std::string(300, 'a'), 431},  // no end in sight
       }) {
    const RequestFraming f = frame(c.text);
    EXPECT_EQ(f.kind, Kind::kError) << c.text.substr(0, 80);
    EXPECT_EQ(f.status, c.status) << c.text.substr(0, 80);
    EXPECT_FALSE(f.message.empty());
  }
  // Equal repeated Content-Length values are allowed (RFC 9110 §8.6).
  EXPECT_EQ(frame("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx").kind, Kind::kReady);
}

}  // namespace
}  // namespace dgemma
