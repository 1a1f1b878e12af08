// Hostile constraints: every bound of CompileLimits ends compilation with a clear error, in bounded
// time and memory, never a hang or a crash.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "guided_test_util.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {

// Compiling `spec` fails with kInvalidArgument mentioning `word`, within `max_ms`.
void expect_refused(const ConstraintSpec& spec, const std::string& word, const CompileLimits& limits = {},
                    double max_ms = 15000) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    compile_constraint(spec, limits);
    ADD_FAILURE() << "compiled: " << spec.text.substr(0, 120);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, max_ms) << spec.text.substr(0, 120);
}

TEST(GuidedLimits, ExponentialDfasStopAtTheStateBound) {
  // (a|b)*a(a|b){n}: the minimal DFA has 2^(n+1) states.
  expect_refused(ConstraintSpec::regex("(a|b)*a(a|b){20}"), "states");
  expect_refused(ConstraintSpec::regex("(.*a){12}.{30}"), "");
  // A small bound is hit quickly.
  CompileLimits small;
  small.max_dfa_states = 100;
  expect_refused(ConstraintSpec::regex("(a|b)*a(a|b){8}"), "more than 100 states", small, 2000);
  // Within the bound it compiles, minimal.
  EXPECT_EQ(compile_constraint(ConstraintSpec::regex("(a|b)*a(a|b){4}")).num_states, 32);
}

TEST(GuidedLimits, SizeBoundsOfPatternsAndTrees) {
  expect_refused(ConstraintSpec::regex(std::string(70000, 'a')), "bytes");
  expect_refused(ConstraintSpec::regex(std::string(100, '(') + "a" + std::string(100, ')')), "nested");
  expect_refused(ConstraintSpec::regex("((a{1000}){1000}){1000}"), "NFA states");
  expect_refused(ConstraintSpec::regex("a{1001}"), "limit");
  CompileLimits small;
  small.max_work = 1000;
  expect_refused(ConstraintSpec::regex("[a-z0-9]{200}@[a-z]{200}"), "steps", small, 2000);
  // Nested stars are cheap.
  EXPECT_EQ(compile_constraint(ConstraintSpec::regex("((((a*)*)*)*)*")).num_states, 1);
}

TEST(GuidedLimits, HostileSchemas) {
  // Many long strings: each maxLength copy of a JSON character is a dozen states.
  std::string props;
  for (int i = 0; i < 40; ++i)
    props += (i ? ", " : "") + fmt::format(R"("f{}": {{"type": "string", "maxLength": 1000}})", i);
  expect_refused(ConstraintSpec::json_schema(R"({"type": "object", "properties": {)" + props + "}}"), "too");
  // $ref fan-out: each level uses the previous one four times (4^12 copies).
  std::string defs = R"("L0": {"type": "string"})";
  for (int i = 1; i <= 12; ++i)
    defs += fmt::format(
        R"(, "L{}": {{"type": "array", "prefixItems": [{{"$ref": "#/$defs/L{}"}}, {{"$ref": "#/$defs/L{}"}},)"
        R"( {{"$ref": "#/$defs/L{}"}}, {{"$ref": "#/$defs/L{}"}}]}})",
        i, i - 1, i - 1, i - 1, i - 1);
  expect_refused(ConstraintSpec::json_schema(R"({"$defs": {)" + defs + R"(}, "$ref": "#/$defs/L12"})"),
                 "too");
  // Deep nesting of the JSON text itself.
  std::string deep;
  for (int i = 0; i < 300; ++i) deep += R"({"type": "array", "items": )";
  deep += "{}" + std::string(300, '}');
  expect_refused(ConstraintSpec::json_schema(deep), "deeper");
  // oneOf of many overlapping branches: the exactly-one product stays within its bound or is refused.
  std::string branches;
  for (int i = 0; i < 8; ++i)
    branches +=
        (i ? ", " : "") + fmt::format(R"({{"type": "string", "pattern": "^(a|b)*a(a|b){{{}}}$"}})", i);
  CompileLimits small;
  small.max_dfa_states = 300;
  expect_refused(ConstraintSpec::json_schema(R"({"oneOf": [)" + branches + "]}"), "states", small);
  // Too many choices, or too many bytes of them.
  expect_refused(ConstraintSpec::choice(std::vector<std::string>(5000, "x")), "choices");
  expect_refused(ConstraintSpec::choice({std::string(70000, 'x')}), "bytes");
}

TEST(GuidedLimits, TheGapMaskFallsBackPastItsWorkBound) {
  std::vector<std::string> pieces = {""};
  std::vector<TokenKind> kinds = {TokenKind::kFiller};
  for (int b = 0x20; b < 0x7F; ++b)
    for (int c = 0x20; c < 0x7F; c += 7) {
      pieces.push_back(std::string(1, static_cast<char>(b)) + static_cast<char>(c));
      kinds.push_back(TokenKind::kText);
    }
  const auto vocab = TokenVocabulary::from_pieces(pieces, kinds);
  const ConstraintSpec spec = ConstraintSpec::regex("(ab|cd)*x[0-9]+");
  const auto exact = compile_for_vocabulary(spec, vocab);
  ASSERT_TRUE(exact->gap_mask_exact());
  CompileLimits small;
  small.max_mask_work = 10;
  const auto approx = compile_for_vocabulary(spec, vocab, small);
  EXPECT_FALSE(approx->gap_mask_exact());
  // The approximation holds the exact mask, and more ("ba": each byte occurs, the pair never).
  int extra = 0;
  for (size_t w = 0; w < exact->gap_mask().size(); ++w) {
    EXPECT_EQ(exact->gap_mask()[w] & ~approx->gap_mask()[w], 0u);
    extra += __builtin_popcount(approx->gap_mask()[w] & ~exact->gap_mask()[w]);
  }
  EXPECT_GT(extra, 0);
}

}  // namespace
}  // namespace dgemma::guided
