// Megabyte inputs, including the single-word worst cases (a 1 MB run of one character is one BPE
// word): they must encode in O(n log n) and round-trip. Prints throughput; asserts no timing (the
// CTest timeout catches a quadratic regression: 1 MB would take hours).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "tokenizer_test_util.h"

namespace dgemma {
namespace {

std::string repeat_to(const std::string& unit, size_t bytes) {
  std::string s;
  s.reserve(bytes + unit.size());
  while (s.size() < bytes) s += unit;
  return s;
}

void check(const Tokenizer& tok, const char* name, const std::string& text, const std::string& want_back) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ tokenizer ] %-24s %7.0f KB -> %8zu ids, %.3f s, %.1f MB/s (wall clock)\n", name, text.size() / 1024.0,
              ids.size(), s, text.size() / s / 1e6);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(tok.decode(ids), want_back) << name;
}

TEST(TokenizerLarge, MegabyteInputsRoundTrip) {
  DG_REQUIRE_GEMMA4(tok);
  constexpr size_t kMB = 1 << 20;
  std::string mixed;
  for (const auto& c : tokenizer_test::golden().cases)
    if (c.text.find("\xE2\x96\x81") == std::string::npos) mixed += c.text + "\n";
  const std::string big_mixed = repeat_to(mixed, kMB);
  check(*tok, "mixed corpus", big_mixed, big_mixed);
  check(*tok, "'a' x 1M", std::string(kMB, 'a'), std::string(kMB, 'a'));
  check(*tok, "space x 1M", std::string(kMB, ' '), std::string(kMB, ' '));
  check(*tok, "newline x 1M", std::string(kMB, '\n'), std::string(kMB, '\n'));
  check(*tok, "U+2581 x 349k", repeat_to("\xE2\x96\x81", kMB), repeat_to(" ", kMB / 3 + 1));
  check(*tok, "'ab' x 512k", repeat_to("ab", kMB), repeat_to("ab", kMB));
  check(*tok, "U+10000 x 256k", repeat_to("\xF0\x90\x80\x80", kMB), repeat_to("\xF0\x90\x80\x80", kMB));
  check(*tok, "<|turn> x 149k (text)", repeat_to("<|turn>", kMB), repeat_to("<|turn>", kMB));
}

}  // namespace
}  // namespace dgemma
