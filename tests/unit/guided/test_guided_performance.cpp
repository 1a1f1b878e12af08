// Costs of guided decoding on typical constraints with the Gemma 4 vocabulary (262,144 ids): compiling
// a nested Pydantic schema, lifting it (trie, gap mask, completions), one state mask, and the walk.
// The bounds are loose (a loaded 2-core machine passes them); the figures are printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "example_schemas.h"
#include "guided_test_util.h"

namespace dgemma::guided {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TEST(GuidedPerformance, PydanticSchemaWithGemma4Vocabulary) {
  const Tokenizer* tok = test::gemma4_tokenizer();
  ASSERT_NE(tok, nullptr) << "Gemma 4 tokenizer missing at " << test::gemma4_tokenizer_path();
  auto t0 = std::chrono::steady_clock::now();
  const auto vocab = TokenVocabulary::from_tokenizer(*tok, test::kFillers);
  const double vocab_ms = ms_since(t0);

  struct Row {
    const char* name;
    ConstraintSpec spec;
  };
  const std::vector<Row> rows = {
      {"pydantic order (9 fields, nested)", ConstraintSpec::json_schema(test::kPydanticOrder)},
      {"json_object (depth 5)", ConstraintSpec::json_object()},
      {"regex email", ConstraintSpec::regex("[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}")},
      {"choice (3)", ConstraintSpec::choice({"positive", "negative", "neutral"})},
  };
  std::printf("vocabulary: %d ids in %.1f ms\n", vocab->size(), vocab_ms);
  for (const Row& row : rows) {
    t0 = std::chrono::steady_clock::now();
    const Dfa dfa = compile_constraint(row.spec);
    const double compile_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    const auto c = TokenConstraint::build(std::make_shared<const Dfa>(dfa), vocab, CompileLimits{});
    const double lift_ms = ms_since(t0);
    // State masks: the slowest of up to 64 states spread over the automaton.
    double mask_ms = 0;
    for (int32_t s = 0; s < dfa.num_states; s += std::max(1, dfa.num_states / 64)) {
      t0 = std::chrono::steady_clock::now();
      const std::vector<uint32_t> mask = c->state_mask(s);
      mask_ms = std::max(mask_ms, ms_since(t0));
    }
    std::printf(
        "%-36s %5d states %3d classes: compile %7.1f ms, lift %7.1f ms (gap mask %s), state mask <= %.2f ms, "
        "%.1f MiB\n",
        row.name, dfa.num_states, dfa.num_classes, compile_ms, lift_ms,
        c->gap_mask_exact() ? "exact" : "approx", mask_ms, c->memory_bytes() / 1048576.0);
    EXPECT_LT(compile_ms + lift_ms, 20000.0) << row.name;
  }

  const auto c = compile_for_vocabulary(ConstraintSpec::json_schema(test::kPydanticOrder), vocab);
  const std::vector<int32_t> ids = tok->encode(test::kPydanticOrderText);
  ASSERT_TRUE(c->accepting(c->walk(c->start(), ids).state));
  const int reps = 2000;
  t0 = std::chrono::steady_clock::now();
  int64_t sum = 0;
  for (int i = 0; i < reps; ++i) sum += c->walk(c->start(), ids).accepted;
  const double walk_ms = ms_since(t0);
  EXPECT_EQ(sum, static_cast<int64_t>(reps) * static_cast<int64_t>(ids.size()));
  std::printf("walk: %zu tokens (%zu bytes) in %.2f us, %.1f ns a token\n", ids.size(),
              std::string(test::kPydanticOrderText).size(), walk_ms * 1000.0 / reps,
              walk_ms * 1e6 / reps / ids.size());
  EXPECT_LT(walk_ms * 1e6 / reps / ids.size(), 5000.0);
}

}  // namespace
}  // namespace dgemma::guided
