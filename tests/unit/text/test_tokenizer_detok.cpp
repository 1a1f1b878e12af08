// IncrementalDetokenizer: whatever way the ids arrive (one at a time, whole 256-token canvases,
// random chunks), every emitted piece is valid UTF-8 and the pieces add up to Tokenizer::decode,
// which itself matches HF (test_tokenizer.cpp).
#include <gtest/gtest.h>

#include <random>
#include <span>
#include <string>
#include <vector>

#include "text/tokenizer/detokenizer.h"
#include "text/tokenizer/utf8.h"
#include "tokenizer_test_util.h"
#include "util/error.h"

namespace dgemma {
namespace {

using Ids = std::vector<int32_t>;

// Feeds `ids` in chunks chosen by `next_chunk`; checks each output and returns the concatenation.
template <typename F>
std::string stream(const Tokenizer& tok, const Ids& ids, bool skip_special, F&& next_chunk) {
  IncrementalDetokenizer detok(tok, skip_special);
  std::string all;
  for (size_t i = 0; i < ids.size();) {
    const size_t n = std::min(ids.size() - i, next_chunk());
    const std::string piece = detok.feed(std::span<const int32_t>(ids.data() + i, n));
    EXPECT_TRUE(utf8::is_valid(piece)) << testing::PrintToString(piece);
    all += piece;
    i += n;
  }
  const std::string tail = detok.flush();
  EXPECT_TRUE(utf8::is_valid(tail));
  all += tail;
  EXPECT_EQ(detok.flush(), "");
  return all;
}

TEST(IncrementalDetokenizer, CorpusOneIdAtATimeMatchesHF) {
  DG_REQUIRE_GEMMA4(tok);
  for (const auto& c : tokenizer_test::golden().cases) {
    EXPECT_EQ(stream(*tok, c.ids, false, [] { return size_t{1}; }), c.decoded) << testing::PrintToString(c.text);
    EXPECT_EQ(stream(*tok, c.ids, true, [] { return size_t{1}; }), c.decoded_skip_special);
    EXPECT_EQ(stream(*tok, c.ids_plain, false, [] { return size_t{1}; }), c.decoded_plain);
  }
  for (const auto& c : tokenizer_test::golden().decode_cases) {
    EXPECT_EQ(stream(*tok, c.ids, false, [] { return size_t{1}; }), c.decoded);
    EXPECT_EQ(stream(*tok, c.ids, true, [] { return size_t{1}; }), c.decoded_skip_special);
  }
}

TEST(IncrementalDetokenizer, CanvasesAndRandomChunksMatchDecode) {
  DG_REQUIRE_GEMMA4(tok);
  // All corpus ids back to back, as one long generation.
  Ids all;
  std::string want;
  for (const auto& c : tokenizer_test::golden().cases) all.insert(all.end(), c.ids.begin(), c.ids.end());
  for (const auto& c : tokenizer_test::golden().decode_cases) all.insert(all.end(), c.ids.begin(), c.ids.end());
  want = tok->decode(all);
  EXPECT_EQ(stream(*tok, all, false, [] { return size_t{256}; }), want);
  std::mt19937 rng(42);
  for (int round = 0; round < 5; ++round)
    EXPECT_EQ(stream(*tok, all, false, [&] { return size_t{1} + rng() % 300; }), want);
  EXPECT_EQ(stream(*tok, all, true, [&] { return size_t{1} + rng() % 7; }), tok->decode(all, true));
}

TEST(IncrementalDetokenizer, HoldsAByteRunUntilItEnds) {
  DG_REQUIRE_GEMMA4(tok);
  const int32_t e4 = *tok->token_to_id("<0xE4>"), bd = *tok->token_to_id("<0xBD>"), a0 = *tok->token_to_id("<0xA0>");
  const int32_t a = *tok->token_to_id("a");
  IncrementalDetokenizer d(*tok, false);
  EXPECT_EQ(d.feed_one(a), "a");
  EXPECT_EQ(d.feed_one(e4), "");
  EXPECT_EQ(d.feed_one(bd), "");
  // Complete, but a further byte could still make the run invalid (HF would then emit U+FFFD for
  // every byte), so it is only released when a non-byte piece arrives.
  EXPECT_EQ(d.feed_one(a0), "");
  EXPECT_EQ(d.feed_one(a), "\xE4\xBD\xA0" "a");
  EXPECT_EQ(d.feed(Ids{e4, bd}), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(d.feed(Ids{e4, bd, a0}), "");
  EXPECT_EQ(d.flush(), "\xE4\xBD\xA0");
}

TEST(IncrementalDetokenizer, BadIdLeavesStateUnchanged) {
  DG_REQUIRE_GEMMA4(tok);
  const int32_t e4 = *tok->token_to_id("<0xE4>"), bd = *tok->token_to_id("<0xBD>"), a0 = *tok->token_to_id("<0xA0>");
  IncrementalDetokenizer d(*tok, false);
  EXPECT_EQ(d.feed_one(e4), "");
  try {
    d.feed(Ids{bd, tok->vocab_size()});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
  EXPECT_THROW(d.feed_one(-3), Error);
  EXPECT_EQ(d.feed(Ids{bd, a0}), "");
  EXPECT_EQ(d.flush(), "\xE4\xBD\xA0");
}

TEST(Tokenizer, ByteValueOfByteFallbackPieces) {
  DG_REQUIRE_GEMMA4(tok);
  for (int b : {0x00, 0x0A, 0x7F, 0xE4, 0xFF}) {
    const int32_t id = *tok->token_to_id(fmt::format("<0x{:02X}>", b));
    ASSERT_TRUE(tok->byte_value(id).has_value()) << b;
    EXPECT_EQ(*tok->byte_value(id), b);
  }
  EXPECT_FALSE(tok->byte_value(tok->encode("Hello").at(0)).has_value());
  EXPECT_FALSE(tok->byte_value(-1).has_value());
  EXPECT_FALSE(tok->byte_value(tok->vocab_size()).has_value());
}

TEST(IncrementalDetokenizer, SkipsSpecialTokensWhenAsked) {
  DG_REQUIRE_GEMMA4(tok);
  const Ids ids = tok->encode("<|channel>thought\nhm<channel|>Hi<turn|>", true);
  IncrementalDetokenizer skip(*tok, true), keep(*tok, false);
  std::string a, b;
  for (int32_t id : ids) {
    a += skip.feed_one(id);
    b += keep.feed_one(id);
  }
  EXPECT_EQ(a + skip.flush(), "thought\nhmHi");
  EXPECT_EQ(b + keep.flush(), "<|channel>thought\nhm<channel|>Hi<turn|>");
}

}  // namespace
}  // namespace dgemma
