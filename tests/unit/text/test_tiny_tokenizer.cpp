// The shipped tiny model's tokenizer (models/tiny-code/tokenizer.json, trained by
// tools/tiny_model/build_tokenizer.py): dgemma's C++ tokenizer must give exactly the ids of the
// Python reference encoder (tools/tiny_model/bpe.py, via tokenizer_fixture.py), decode them back,
// and keep the Gemma 4 control tokens at the ids the engine, template and parsers rely on.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace dgemma {
namespace {

const Tokenizer& tiny() {
  static std::unique_ptr<Tokenizer> tok =
      Tokenizer::from_file(std::string(DGEMMA_SOURCE_DIR) + "/models/tiny-code/tokenizer.json");
  return *tok;
}

TEST(TinyTokenizer, MatchesThePythonReferenceEncoder) {
  const Json fx =
      tokenizer_test::read_json_file(std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_model/tokenizer_ids.json");
  const auto& cases = fx.at("cases");
  ASSERT_GE(cases.size(), 20u);
  size_t total = 0;
  for (const Json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const bool allow_special = c.at("allow_special").get<bool>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto got = tiny().encode(text, allow_special);
    EXPECT_EQ(got, want) << "text: " << text.substr(0, 80);
    if (text.find("\xE2\x96\x81") == std::string::npos) {  // "▁" in the input decodes as a space
      EXPECT_EQ(tiny().decode(got), text) << "text: " << text.substr(0, 80);
    }
    total += want.size();
  }
  EXPECT_GT(total, 5000u);
}

TEST(TinyTokenizer, ControlTokensKeepTheirGemma4Ids) {
  const std::vector<std::pair<std::string, int32_t>> ids = {
      {"<pad>", 0},         {"<eos>", 1},   {"<bos>", 2},        {"<unk>", 3},          {"<mask>", 4},
      {"<|tool>", 46},      {"<tool|>", 47}, {"<|tool_call>", 48}, {"<tool_call|>", 49}, {"<|tool_response>", 50},
      {"<tool_response|>", 51}, {"<|\"|>", 52}, {"<|think|>", 98}, {"<|channel>", 100},   {"<channel|>", 101},
      {"<|turn>", 105},     {"<turn|>", 106}};
  for (const auto& [piece, id] : ids) {
    EXPECT_EQ(tiny().token_to_id(piece), id) << piece;
    EXPECT_TRUE(tiny().is_special(id)) << piece;
  }
  for (const char* piece : {"<|image>", "<|audio>", "<|image|>", "<|audio|>", "<image|>", "<audio|>", "<|video|>"}) {
    ASSERT_TRUE(tiny().token_to_id(piece).has_value()) << piece;
    EXPECT_TRUE(tiny().is_special(*tiny().token_to_id(piece))) << piece;
  }
  EXPECT_EQ(tiny().vocab_size(), 8192);
  EXPECT_EQ(tiny().token_to_id("<0x0A>"), 107 + 0x0A);
  // Control tokens typed by a user stay text unless allow_special.
  EXPECT_EQ(tiny().encode("<|turn>", true), std::vector<int32_t>{105});
  const auto plain = tiny().encode("<|turn>", false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(tiny().decode(plain), "<|turn>");
}

}  // namespace
}  // namespace dgemma
