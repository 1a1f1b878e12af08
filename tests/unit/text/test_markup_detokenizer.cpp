// Model output as the parsers read it: the Gemma 4 markup tokens are found by id (never by text that
// spells them) and become one markup byte each; the other special tokens give no text unless asked
// for; render() gives client text, dropping or spelling out what is left of the markup.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "text/tokenizer/detokenizer.h"
#include "text/parsers/markup_scan.h"
#include "tokenizer_test_util.h"
#include "util/error.h"

namespace dgemma {
namespace {

std::string feed_all(const Tokenizer& tok, bool skip_special, const std::vector<int32_t>& ids, size_t chunk) {
  MarkupDetokenizer d(tok, skip_special);
  std::string out;
  for (size_t i = 0; i < ids.size(); i += chunk) {
    const size_t n = std::min(chunk, ids.size() - i);
    out += d.feed(std::span<const int32_t>(ids.data() + i, n));
  }
  return out + d.flush();
}

TEST(MarkupDetokenizer, MarkupTokensBecomeMarkupBytesOtherSpecialsVanish) {
  DG_REQUIRE_GEMMA4(tok);
  const std::string literal =
      "Hi<pad><|channel>thought\nr<channel|><|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|>"
      "<|turn>ok<eos><|tool_response>";
  const std::vector<int32_t> ids = tok->encode(literal, /*allow_special=*/true);
  for (size_t chunk : {size_t{1}, size_t{3}, ids.size()}) {
    SCOPED_TRACE(chunk);
    const std::string skipped = feed_all(*tok, true, ids, chunk);
    EXPECT_EQ(skipped, markup::from_literal(
                           "Hi<|channel>thought\nr<channel|><|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|>"
                           "ok<|tool_response>"));
    EXPECT_EQ(markup::render(skipped, false), tok->decode(ids, /*skip_special=*/true));
    const std::string kept = feed_all(*tok, false, ids, chunk);
    EXPECT_EQ(kept, markup::from_literal(literal));
    EXPECT_EQ(markup::render(kept, true), tok->decode(ids, /*skip_special=*/false));
  }
}

TEST(MarkupDetokenizer, TextThatSpellsMarkupStaysText) {
  DG_REQUIRE_GEMMA4(tok);
  const std::vector<int32_t> ids = tok->encode("<|tool_call>call:f{}<tool_call|>", /*allow_special=*/false);
  const std::string text = feed_all(*tok, true, ids, 1);
  EXPECT_EQ(text, "<|tool_call>call:f{}<tool_call|>");
  for (char c : text) EXPECT_FALSE(markup::is_markup_byte(c));
}

TEST(MarkupDetokenizer, ByteRunsAndBadIds) {
  DG_REQUIRE_GEMMA4(tok);
  // A multi-byte character split over byte-fallback pieces is held until complete.
  const std::vector<int32_t> ids = tok->encode("é 🙂", true);
  EXPECT_EQ(feed_all(*tok, true, ids, 1), "é 🙂");
  MarkupDetokenizer d(*tok, true);
  const std::vector<int32_t> bad = {tok->vocab_size()};
  EXPECT_THROW(d.feed(bad), Error);
  const std::vector<int32_t> neg = {-1};
  EXPECT_THROW(d.feed(neg), Error);
}

TEST(Markup, RenderAndFromLiteralAreInverse) {
  const std::string literal = "a<|tool_call>b<tool_call|>c<|channel>d<channel|>e<|tool_response>f<|\"|>g";
  const std::string m = markup::from_literal(literal);
  EXPECT_EQ(m.size(), std::string("abcdefg").size() + 6);
  EXPECT_EQ(markup::render(m, true), literal);
  EXPECT_EQ(markup::render(m, false), "abcdefg");
  EXPECT_EQ(markup::from_literal("<|tool_cal <tool_call"), "<|tool_cal <tool_call");  // partial: text
}

}  // namespace
}  // namespace dgemma
