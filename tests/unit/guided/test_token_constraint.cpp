// Constraints lifted to token ids (src/guided/token_constraint.h): the walk, the masks and the
// completions, held to byte-level brute force on a hand-made vocabulary, the tiny model's tokenizer
// (8,192 ids, byte fallback) and the Gemma 4 tokenizer.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "guided_test_util.h"
#include "text/tokenizer/utf8.h"

namespace dgemma::guided {
namespace {

using test::kFillers;

bool bit(const std::vector<uint32_t>& mask, int32_t id) {
  return (mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u;
}

// The walk by brute force: per token, its bytes appended; stop at the first non-viable prefix.
int32_t expected_accepted(const TokenConstraint& c, const std::vector<int32_t>& ids) {
  std::string text;
  int32_t accepted = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= c.vocabulary().size()) break;
    const TokenKind k = c.vocabulary().kind(id);
    if (k == TokenKind::kNever) break;
    if (k == TokenKind::kText) {
      const std::string next = text + std::string(c.vocabulary().bytes(id));
      if (!test::viable(c.dfa(), next)) break;
      text = next;
    }
    accepted = static_cast<int32_t>(i + 1);
  }
  return accepted;
}

// Every state's mask against single steps; the gap mask against the union of the state masks.
void check_masks(const TokenConstraint& c) {
  const int32_t v = c.vocabulary().size();
  std::vector<uint32_t> all(static_cast<size_t>(c.mask_words()), 0);
  for (int32_t s = 0; s < c.dfa().num_states; ++s) {
    const std::vector<uint32_t> m = c.state_mask(s);
    for (int32_t id = 0; id < v; ++id) {
      const bool allowed = c.step(s, id) >= 0;
      ASSERT_EQ(bit(m, id), allowed) << "state " << s << " token " << id << " \"" << c.vocabulary().bytes(id)
                                     << "\"";
    }
    for (size_t w = 0; w < all.size(); ++w) all[w] |= m[w];
  }
  ASSERT_TRUE(c.gap_mask_exact());
  EXPECT_EQ(c.gap_mask(), all);
}

// 0 pad (filler), 1 "<s>" (special: never), then text pieces incl. multi-byte ones and raw bytes; with
// `all_bytes`, one piece per byte value after them (as byte fallback gives).
std::shared_ptr<const TokenVocabulary> toy_vocabulary(bool all_bytes = false) {
  std::vector<std::string> pieces = {"",     "<s>",  "{",       "}",   "\"",  "\": ", "a",    "ab",   "b\"",
                                     ", ",   "1",    "12",      "\n",  "\\n", "é",    "\xC3", "\xA9", " ",
                                     "true", "null", "\"a\": ", "\":", "x",   "",     "b",    ":",    "0"};
  if (all_bytes)
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
  std::vector<TokenKind> kinds(pieces.size(), TokenKind::kText);
  kinds[0] = TokenKind::kFiller;
  kinds[1] = TokenKind::kNever;
  return TokenVocabulary::from_pieces(pieces, kinds);
}

TEST(GuidedTokens, WalkSkipsFillersAndStopsAtTheFirstBadToken) {
  const auto vocab = toy_vocabulary();
  const auto c = compile_for_vocabulary(
      ConstraintSpec::json_schema(
          R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]})"),
      vocab);
  // {"a": "ab\né"}   written as { "a": ... with fillers in between
  const std::vector<int32_t> good = {2, 20, 0, 4, 7, 13, 14, 0, 4, 3, 0, 0};
  const WalkResult r = c->walk(c->start(), good);
  EXPECT_EQ(r.accepted, static_cast<int32_t>(good.size()));
  EXPECT_TRUE(c->accepting(r.state));
  // A raw newline token inside the string is rejected there; so is a special token, an id out of range.
  for (const auto& [ids, want] : std::vector<std::pair<std::vector<int32_t>, int32_t>>{
           {{2, 20, 4, 7, 12, 4, 3}, 4},
           {{2, 20, 4, 1, 4, 3}, 3},
           {{2, 20, 4, 99}, 3},
           {{2, 20, 4, -1}, 3},
           {{0, 0, 3}, 2},
           {{2, 20, 4, 15, 16, 4, 3}, 7},  // é as two byte pieces
           {{2, 20, 4, 15, 4}, 4},         // a lone lead byte, then a quote
           {{}, 0}}) {
    const WalkResult w = c->walk(c->start(), ids);
    EXPECT_EQ(w.accepted, want);
    EXPECT_EQ(w.accepted, expected_accepted(*c, ids));
  }
  check_masks(*c);
  EXPECT_FALSE(bit(c->gap_mask(), 1));   // never
  EXPECT_TRUE(bit(c->gap_mask(), 0));    // filler
  EXPECT_FALSE(bit(c->gap_mask(), 12));  // a raw newline occurs nowhere in the text form
  EXPECT_TRUE(bit(c->gap_mask(), 18));   // "true" may be string content

  const auto integer = compile_for_vocabulary(ConstraintSpec::json_schema(R"({"type": "integer"})"), vocab);
  check_masks(*integer);
  for (int32_t id : {0, 10, 11, 26}) EXPECT_TRUE(bit(integer->gap_mask(), id)) << id;
  for (int32_t id : {1, 2, 4, 6, 18, 17}) EXPECT_FALSE(bit(integer->gap_mask(), id)) << id;
}

TEST(GuidedTokens, CompletionsCloseEveryState) {
  const auto vocab = toy_vocabulary(/*all_bytes=*/true);
  const auto c = compile_for_vocabulary(ConstraintSpec::json_schema(
                                            R"({"type": "object", "required": ["a", "b"],
              "properties": {"a": {"type": "string", "minLength": 2}, "b": {"type": "integer"}}})"),
                                        vocab);
  EXPECT_EQ(c->completion_bytes(c->start()), R"({"a": "  ", "b": 0})");
  for (int32_t s = 0; s < c->dfa().num_states; ++s) {
    const std::string bytes = c->completion_bytes(s);
    EXPECT_EQ(static_cast<int32_t>(bytes.size()), c->completion_length(s));
    const auto ids = c->completion_tokens(s);
    ASSERT_TRUE(ids.has_value()) << "state " << s;
    const WalkResult w = c->walk(s, *ids);
    EXPECT_EQ(w.accepted, static_cast<int32_t>(ids->size()));
    EXPECT_TRUE(c->accepting(w.state)) << "state " << s << " completion " << bytes;
  }
}

// Lifting through a real tokenizer: encoded accepted texts walk to acceptance, a corrupted text stops
// where the bytes stop being viable, masks and completions as above.
void check_tokenizer(const Tokenizer& tok, const std::vector<ConstraintSpec>& specs, bool all_state_masks) {
  const auto vocab = TokenVocabulary::from_tokenizer(tok, kFillers);
  std::mt19937_64 rng(7);
  for (const ConstraintSpec& spec : specs) {
    const auto c = compile_for_vocabulary(spec, vocab);
    for (int i = 0; i < 30; ++i) {
      const std::string text = test::sample(c->dfa(), rng, 0.05, 120);
      if (text.find("\xE2\x96\x81") != std::string::npos) continue;  // U+2581 decodes as a space
      std::vector<int32_t> ids = tok.encode(text);
      ASSERT_EQ(tok.decode(ids), text);
      // Fillers sprinkled in change nothing.
      ids.insert(ids.begin() + static_cast<long>(std::uniform_int_distribution<size_t>(0, ids.size())(rng)),
                 0);
      const WalkResult w = c->walk(c->start(), ids);
      ASSERT_EQ(w.accepted, static_cast<int32_t>(ids.size())) << text;
      ASSERT_TRUE(c->accepting(w.state)) << text;
      // Corrupt one token: the walk stops exactly where the bytes stop being viable.
      std::vector<int32_t> bad = ids;
      bad[std::uniform_int_distribution<size_t>(0, bad.size() - 1)(rng)] =
          std::uniform_int_distribution<int32_t>(0, vocab->size() - 1)(rng);
      ASSERT_EQ(c->walk(c->start(), bad).accepted, expected_accepted(*c, bad)) << text;
      // The completion of every prefix closes the value.
      const size_t cut = std::uniform_int_distribution<size_t>(0, ids.size())(rng);
      const WalkResult p = c->walk(c->start(), std::span<const int32_t>(ids).subspan(0, cut));
      const auto rest = c->completion_tokens(p.state);
      ASSERT_TRUE(rest.has_value());
      ASSERT_TRUE(c->accepting(c->walk(p.state, *rest).state)) << text.substr(0, cut);
    }
    if (all_state_masks) {
      check_masks(*c);
    } else {
      // Sampled states against single steps, and the gap mask holding each of them.
      for (int i = 0; i < 5; ++i) {
        const int32_t s = std::uniform_int_distribution<int32_t>(0, c->dfa().num_states - 1)(rng);
        const std::vector<uint32_t> m = c->state_mask(s);
        for (int32_t id = 0; id < vocab->size(); ++id) {
          ASSERT_EQ(bit(m, id), c->step(s, id) >= 0) << "state " << s << " token " << id;
          if (bit(m, id)) {
            ASSERT_TRUE(bit(c->gap_mask(), id));
          }
        }
      }
    }
    // Control tokens are never allowed; fillers always.
    for (int32_t id : {2, 105, 100, 48}) EXPECT_FALSE(bit(c->gap_mask(), id)) << id;
    for (int32_t id : kFillers) EXPECT_TRUE(bit(c->gap_mask(), id)) << id;
  }
}

const std::vector<ConstraintSpec>& tokenizer_specs() {
  static const std::vector<ConstraintSpec> specs = {
      ConstraintSpec::json_schema(R"({"type": "object", "properties": {"name": {"type": "string"},
          "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}},
          "n": {"type": ["integer", "null"]}},
          "required": ["name"]})"),
      ConstraintSpec::regex("[a-z]+@[a-z]+\\.(com|org)"),
      ConstraintSpec::regex("(漢字|😀|é)+ ok"),
      ConstraintSpec::choice({"positive", "negative", "neutral ☯"}),
      ConstraintSpec::json_object(),
  };
  return specs;
}

TEST(GuidedTokens, TinyModelTokenizer) {
  const Tokenizer& tok = test::tiny_tokenizer();
  // Multi-byte characters the tiny vocabulary lacks go through byte-fallback pieces.
  const std::vector<int32_t> ids = tok.encode("漢😀");
  bool byte_pieces = false;
  for (int32_t id : ids) byte_pieces = byte_pieces || tok.byte_value(id).has_value();
  ASSERT_TRUE(byte_pieces);
  check_tokenizer(tok, tokenizer_specs(), /*all_state_masks=*/true);
}

TEST(GuidedTokens, Gemma4Tokenizer) {
  const Tokenizer* tok = test::gemma4_tokenizer();
  ASSERT_NE(tok, nullptr) << "Gemma 4 tokenizer missing at " << test::gemma4_tokenizer_path();
  check_tokenizer(*tok, tokenizer_specs(), /*all_state_masks=*/false);
  // A JSON string gap never allows a token holding a raw newline or a raw control character.
  const auto vocab = TokenVocabulary::from_tokenizer(*tok, kFillers);
  const auto c = compile_for_vocabulary(ConstraintSpec::json_schema(R"({"type": "string"})"), vocab);
  int newline_tokens = 0;
  for (int32_t id = 0; id < vocab->size(); ++id) {
    if (vocab->kind(id) != TokenKind::kText) continue;
    const std::string_view b = vocab->bytes(id);
    if (b.find('\n') != std::string_view::npos) {
      ++newline_tokens;
      EXPECT_FALSE(bit(c->gap_mask(), id)) << id;
    }
  }
  EXPECT_GT(newline_tokens, 10);
}

}  // namespace
}  // namespace dgemma::guided
