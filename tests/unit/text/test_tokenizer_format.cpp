// tokenizer.json handling on small hand-made files: what is rejected (and how), and the BPE /
// added-token / pre-tokenizer / decoder semantics of HF `tokenizers`, each derived from its
// definition on inputs small enough to check by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"
#include "text/tokenizer/tokenizer_impl.h"
#include "tokenizer_test_util.h"
#include "util/error.h"
#include "util/json.h"

namespace dgemma {
namespace {

using Ids = std::vector<int32_t>;

// A small Gemma-shaped tokenizer.json: byte fallback, Replace " "->"▁", Split " " (a no-op after
// the Replace, as in Gemma), decoder Replace+ByteFallback+Fuse.
Json base_json() {
  Json vocab = Json::object();
  int id = 0;
  for (const char* p : {"<pad>", "<eos>", "<bos>", "<unk>", "a", "b", "c", "\xE2\x96\x81", "ab", "bc", "abc",
                        "aa", "\xE2\x96\x81\xE2\x96\x81", "\xE2\x96\x81" "a", "a\xE2\x96\x81", "<|turn>", "<x>"})
    vocab[p] = id++;
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = id++;
  Json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       Json::array({{{"id", 0}, {"content", "<pad>"}, {"special", true}, {"normalized", false}},
                    {{"id", 1}, {"content", "<eos>"}, {"special", true}, {"normalized", false}},
                    {{"id", 2}, {"content", "<bos>"}, {"special", true}, {"normalized", false}},
                    {{"id", 3}, {"content", "<unk>"}, {"special", true}, {"normalized", false}},
                    {{"id", 15}, {"content", "<|turn>"}, {"special", true}, {"normalized", false}},
                    {{"id", 16}, {"content", "<x>"}, {"special", false}, {"normalized", false}}})},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}},
      {"pre_tokenizer",
       {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}}},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", Json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", Json::array({Json::array({"b", "c"}), Json::array({"a", "b"}), Json::array({"ab", "c"}),
                                Json::array({"a", "a"}), Json::array({"\xE2\x96\x81", "\xE2\x96\x81"}),
                                Json::array({"\xE2\x96\x81", "a"}), Json::array({"a", "\xE2\x96\x81"})})}}}};
  return j;
}

std::unique_ptr<Tokenizer> load(const Json& j) { return Tokenizer::from_json_text(j.dump(), "test tokenizer"); }

int32_t id_of(const Tokenizer& t, const char* piece) {
  auto id = t.token_to_id(piece);
  EXPECT_TRUE(id.has_value()) << piece;
  return id.value_or(-1);
}

// Expects loading to fail with kInvalidFile and a message containing `needle`.
void expect_rejected(const Json& j, const std::string& needle) {
  try {
    load(j);
    ADD_FAILURE() << "accepted; expected an error mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidFile) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test tokenizer"), std::string::npos) << e.what();
  }
}

void expect_rejected_text(const std::string& text, const std::string& needle) {
  try {
    Tokenizer::from_json_text(text, "test tokenizer");
    ADD_FAILURE() << "accepted; expected an error mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidFile) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TokenizerFormat, RejectsUnsupportedKinds) {
  {
    Json j = base_json();
    j["model"]["type"] = "WordPiece";
    expect_rejected(j, "WordPiece");
  }
  {
    Json j = base_json();
    j["model"] = {{"type", "Unigram"}, {"unk_id", 0}, {"vocab", Json::array({Json::array({"a", -1.0})})}};
    expect_rejected(j, "Unigram");
  }
  {
    Json j = base_json();
    j["normalizer"] = {{"type", "NFKC"}};
    expect_rejected(j, "NFKC");
  }
  {
    Json j = base_json();
    j["normalizer"] = {{"type", "Sequence"}, {"normalizers", Json::array({{{"type", "Lowercase"}}})}};
    expect_rejected(j, "Lowercase");
  }
  {
    Json j = base_json();
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}};
    expect_rejected(j, "ByteLevel");
  }
  {
    Json j = base_json();
    j["pre_tokenizer"]["pattern"] = {{"Regex", "\\s+"}};
    expect_rejected(j, "Regex");
  }
  {
    Json j = base_json();
    j["decoder"]["decoders"].push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    expect_rejected(j, "Strip");
  }
  {
    Json j = base_json();
    j["decoder"] = nullptr;
    expect_rejected(j, "decoder");
  }
  {
    Json j = base_json();
    j["model"]["dropout"] = 0.1;
    expect_rejected(j, "dropout");
  }
  {
    Json j = base_json();
    j["model"]["continuing_subword_prefix"] = "##";
    expect_rejected(j, "continuing_subword_prefix");
  }
  {
    Json j = base_json();
    j["added_tokens"][4]["lstrip"] = true;
    expect_rejected(j, "lstrip");
  }
  {
    Json j = base_json();
    j["truncation"] = {{"max_length", 8}};
    expect_rejected(j, "truncation");
  }
}

TEST(TokenizerFormat, RejectsMalformedFiles) {
  expect_rejected_text("", "invalid JSON");
  expect_rejected_text("{\"model\": ", "invalid JSON");
  expect_rejected_text("[1, 2]", "object");
  expect_rejected_text(std::string(200, '[') + std::string(200, ']'), "deeper");
  {
    Json j = base_json();
    j.erase("model");
    expect_rejected(j, "model");
  }
  {
    Json j = base_json();
    j["model"]["merges"].push_back(Json::array({"a", "zz"}));
    expect_rejected(j, "not in the vocab");
  }
  {
    Json j = base_json();
    j["model"]["merges"].push_back(Json::array({"a", "c"}));  // "ac" is not a piece
    expect_rejected(j, "not in the vocab");
  }
  {
    Json j = base_json();
    j["model"]["merges"].push_back(Json::array({1, 2}));
    expect_rejected(j, "merge");
  }
  {
    Json j = base_json();
    j["model"]["merges"].push_back("abc");  // old "a b" form without a space
    expect_rejected(j, "two pieces");
  }
  {
    Json j = base_json();
    j["model"]["vocab"]["zz"] = "seven";
    expect_rejected(j, "integer");
  }
  {
    Json j = base_json();
    j["model"]["vocab"]["zz"] = -5;
    expect_rejected(j, "out of range");
  }
  {
    Json j = base_json();
    j["model"]["vocab"]["zz"] = 2000000000;
    expect_rejected(j, "out of range");
  }
  {
    Json j = base_json();
    j["model"]["vocab"]["zz"] = 4;  // id of "a"
    expect_rejected(j, "two pieces");
  }
  {
    Json j = base_json();
    j["model"]["unk_token"] = "<nope>";
    expect_rejected(j, "unk_token");
  }
  {
    Json j = base_json();
    j["added_tokens"][4]["id"] = 3;  // "<|turn>" is 15 in the vocab
    expect_rejected(j, "vocab says");
  }
  {
    Json j = base_json();
    j["added_tokens"].push_back({{"id", 900000}, {"content", "<far>"}, {"special", true}});
    expect_rejected(j, "sparse");
  }
  try {
    Tokenizer::from_file("/nonexistent/dir/tokenizer.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  }
}

TEST(TokenizerFormat, OldStyleMergesAndLoadableBase) {
  Json j = base_json();
  Json merges = Json::array();
  for (const auto& m : j["model"]["merges"]) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  Json j2 = j;
  j2["model"]["merges"] = merges;
  auto a = load(j), b = load(j2);
  for (const char* text : {"abc", "a bc", "aaaa  a", "cab ba"}) EXPECT_EQ(a->encode(text), b->encode(text)) << text;
  EXPECT_EQ(a->vocab_size(), 17 + 256);
}

TEST(TokenizerBpe, LowestRankMergesFirstLeftmostOnTies) {
  auto t = load(base_json());
  const int32_t a = id_of(*t, "a"), b = id_of(*t, "b"), c = id_of(*t, "c"), bc = id_of(*t, "bc"),
                aa = id_of(*t, "aa"), abc = id_of(*t, "abc");
  // (b,c) has rank 0 and (a,b) rank 1: "abc" -> a + bc, and (a, bc) is no merge.
  EXPECT_EQ(t->encode("abc"), (Ids{a, bc}));
  // Without the (b,c) merge, (a,b) then (ab,c) build "abc".
  Json j = base_json();
  j["model"]["merges"].erase(0);
  EXPECT_EQ(load(j)->encode("abc"), (Ids{abc}));
  // (a,a) on "aaa": the leftmost pair wins.
  EXPECT_EQ(t->encode("aaa"), (Ids{aa, a}));
  EXPECT_EQ(t->encode("aaaa"), (Ids{aa, aa}));
  EXPECT_EQ(t->encode("cab"), (Ids{c, id_of(*t, "ab")}));
  EXPECT_EQ(t->encode("b"), (Ids{b}));
}

TEST(TokenizerBpe, ByteFallbackAndUnknowns) {
  auto t = load(base_json());
  // "é" is not a piece: its UTF-8 bytes C3 A9.
  EXPECT_EQ(t->encode("\xC3\xA9"), (Ids{id_of(*t, "<0xC3>"), id_of(*t, "<0xA9>")}));
  EXPECT_EQ(t->decode(t->encode("x\xC3\xA9y")), "x\xC3\xA9y");

  Json j = base_json();
  j["model"]["byte_fallback"] = false;
  auto fused = load(j);
  const int32_t unk = id_of(*fused, "<unk>"), a = id_of(*fused, "a");
  EXPECT_EQ(fused->encode("xyz"), (Ids{unk}));           // fuse_unk: one <unk> for the run
  EXPECT_EQ(fused->encode("axyza"), (Ids{a, unk, a}));
  j["model"]["fuse_unk"] = false;
  EXPECT_EQ(load(j)->encode("xyz"), (Ids{unk, unk, unk}));
  j["model"]["unk_token"] = nullptr;
  try {
    load(j)->encode("x");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  }
}

TEST(TokenizerBpe, IgnoreMergesTakesWholeWordsFromTheVocab) {
  Json j = base_json();
  j["model"]["merges"] = Json::array({Json::array({"a", "b"}), Json::array({"b", "c"})});
  auto t = load(j);
  EXPECT_EQ(t->encode("abc"), (Ids{id_of(*t, "ab"), id_of(*t, "c")}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j)->encode("abc"), (Ids{id_of(*t, "abc")}));  // "abc" is a piece
}

// pre_tokenizer Split on "▁" (after the normaliser) with each behaviour; the merges (a,▁) and (▁,a)
// and (▁,▁) show where the word boundaries fall.
TEST(TokenizerPreTokenizer, SplitBehaviours) {
  auto with = [](const char* behavior, bool invert = false) {
    Json j = base_json();
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           Json::array({{{"type", "Split"},
                                         {"pattern", {{"String", "\xE2\x96\x81"}}},
                                         {"behavior", behavior},
                                         {"invert", invert}}})}};
    return load(j);
  };
  auto base = load(base_json());
  const int32_t a = id_of(*base, "a"), m = id_of(*base, "\xE2\x96\x81"), mm = id_of(*base, "\xE2\x96\x81\xE2\x96\x81"),
                am = id_of(*base, "a\xE2\x96\x81"), ma = id_of(*base, "\xE2\x96\x81" "a");
  // No split: one word "a▁a"; (▁,a) has a lower rank than (a,▁).
  EXPECT_EQ(base->encode("a a"), (Ids{a, ma}));
  EXPECT_EQ(with("Isolated")->encode("a a"), (Ids{a, m, a}));
  EXPECT_EQ(with("Removed")->encode("a a"), (Ids{a, a}));
  EXPECT_EQ(with("MergedWithPrevious")->encode("a a"), (Ids{am, a}));
  EXPECT_EQ(with("MergedWithNext")->encode("a a"), (Ids{a, ma}));
  EXPECT_EQ(with("Isolated")->encode("a  a"), (Ids{a, m, m, a}));
  EXPECT_EQ(with("Contiguous")->encode("a  a"), (Ids{a, mm, a}));
  // MergedWithPrevious: only the first of two delimiters joins the previous piece.
  EXPECT_EQ(with("MergedWithPrevious")->encode("a  a"), (Ids{am, m, a}));
  EXPECT_EQ(with("MergedWithNext")->encode("a  a"), (Ids{a, m, ma}));
  // invert: the pattern marks the content, so the non-"▁" runs become the delimiters.
  EXPECT_EQ(with("Removed", true)->encode("a a"), (Ids{m}));
}

TEST(TokenizerNormalizer, PrependAndReplace) {
  Json j = base_json();
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", Json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                                  {{"type", "Replace"},
                                                   {"pattern", {{"String", " "}}},
                                                   {"content", "\xE2\x96\x81"}}})}};
  auto t = load(j);
  const int32_t ma = id_of(*t, "\xE2\x96\x81" "a"), turn = id_of(*t, "<|turn>");
  // Each text segment between added tokens gets the prefix.
  EXPECT_EQ(t->encode("a<|turn>a", true), (Ids{ma, turn, ma}));
  EXPECT_EQ(t->encode("<|turn>", true), (Ids{turn}));
}

TEST(TokenizerAddedTokens, SpecialOnlyWhenAllowedNonSpecialAlways) {
  auto t = load(base_json());
  const int32_t turn = id_of(*t, "<|turn>"), x = id_of(*t, "<x>"), a = id_of(*t, "a");
  EXPECT_EQ(t->encode("a<|turn>a", true), (Ids{a, turn, a}));
  const Ids plain = t->encode("a<|turn>a", false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), turn), 0);
  EXPECT_EQ(t->decode(plain), "a<|turn>a");
  EXPECT_EQ(t->encode("a<x>a", false), (Ids{a, x, a}));
  EXPECT_TRUE(t->is_special(turn));
  EXPECT_FALSE(t->is_special(x));
  EXPECT_FALSE(t->is_special(a));
  EXPECT_EQ(t->decode(Ids{a, turn, x, 0}, true), "a<x>");
}

TEST(TokenizerAddedTokens, LeftmostLongestAndNormalizedMatching) {
  Json j = base_json();
  j["added_tokens"].push_back({{"id", 300}, {"content", "ca"}, {"special", false}, {"normalized", false}});
  j["added_tokens"].push_back({{"id", 301}, {"content", "cab"}, {"special", false}, {"normalized", false}});
  j["added_tokens"].push_back({{"id", 302}, {"content", "abca"}, {"special", false}, {"normalized", false}});
  // Matched on the normalised text: "▁b" only exists after " " -> "▁".
  j["added_tokens"].push_back({{"id", 303}, {"content", "\xE2\x96\x81" "b"}, {"special", false}, {"normalized", true}});
  // A normalized token's own content is normalised too: "c a" is matched as "c▁a".
  j["added_tokens"].push_back({{"id", 304}, {"content", "c a"}, {"special", false}, {"normalized", true}});
  auto t = load(j);
  EXPECT_EQ(t->vocab_size(), 305);
  EXPECT_EQ(t->encode("bc a"), (Ids{5, 304}));
  EXPECT_EQ(t->decode(Ids{304}), "c a");
  EXPECT_EQ(t->encode("cabx").front(), 301);            // longest at the leftmost start
  EXPECT_EQ(t->encode("xabcab")[1], 302);                // leftmost start wins over a longer later one
  EXPECT_EQ(t->encode("a b"), (Ids{4, 303}));
  EXPECT_EQ(t->token_to_id("cab"), 301);
  EXPECT_EQ(t->id_to_token(303), "\xE2\x96\x81" "b");
  EXPECT_EQ(t->decode(Ids{303}), " b");
}

TEST(TokenizerDecode, ByteRunsAndHoles) {
  Json j = base_json();
  j["model"]["vocab"].erase("c");  // id 6 becomes a hole
  j["model"]["merges"] = Json::array();
  auto t = load(j);
  const int32_t e4 = id_of(*t, "<0xE4>"), bd = id_of(*t, "<0xBD>"), a0 = id_of(*t, "<0xA0>"), a = id_of(*t, "a");
  EXPECT_EQ(t->decode(Ids{e4, bd, a0}), "\xE4\xBD\xA0");
  // An invalid run becomes one U+FFFD per byte, even its valid-looking prefix.
  EXPECT_EQ(t->decode(Ids{e4, bd, a}), "\xEF\xBF\xBD\xEF\xBF\xBD" "a");
  EXPECT_EQ(t->decode(Ids{e4, bd, a0, id_of(*t, "<0xFF>")}), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  // A hole (and a skipped special token) is dropped before the decoder: the run continues.
  EXPECT_EQ(t->decode(Ids{e4, 6, bd, a0}), "\xE4\xBD\xA0");
  EXPECT_EQ(t->decode(Ids{e4, 2, bd, a0}, true), "\xE4\xBD\xA0");
  EXPECT_EQ(t->decode(Ids{e4, 2, bd, a0}, false), "\xEF\xBF\xBD<bos>\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(t->id_to_token(6), "");
  EXPECT_FALSE(t->token_to_id("c").has_value());
}

// The "split before ▁" shortcut must never change a result: compare with it switched off on
// random texts built from the characters that matter (">" precedes "▁" inside the piece ">▁</").
TEST(TokenizerGemma4, MetaSplitShortcutChangesNothing) {
  DG_REQUIRE_GEMMA4(shared);
  (void)shared;
  auto slow = Tokenizer::from_file(tokenizer_test::gemma4_tokenizer_path());
  tokenizer_detail::TestAccess::impl(*slow).split_before_meta = false;
  const std::vector<std::string> alphabet = {" ", "  ", ">", "<", "/", "a", "the", "\xE2\x96\x81", "\n", "\xF0\x90\x80\x80",
                                             "\xC3\xA9", "x", "</", "> </", "1", ".", "\t", "\xE4\xBD\xA0"};
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) text += alphabet[rng() % alphabet.size()];
    ASSERT_EQ(shared->encode(text), slow->encode(text)) << testing::PrintToString(text);
  }
  for (const auto& c : tokenizer_test::golden().cases) ASSERT_EQ(slow->encode(c.text, true), c.ids) << c.text;
}

}  // namespace
}  // namespace dgemma
