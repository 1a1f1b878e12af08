// The commit of a canvas with top-N alternatives (top_logprobs): one row per returned token, in step
// with the tokens through EOS trimming and dropped gap filler; a pinned token is its own only
// alternative with log-probability 0.
#include <gtest/gtest.h>

#include <vector>

#include "engine/sequence.h"

namespace dgemma {
namespace {

constexpr int kC = 4;
constexpr int kVocab = 100;
constexpr int32_t kEos = 1, kPad = 0;

SequenceParams params(std::vector<PinnedSpan> pins, int64_t max_tokens) {
  SequenceParams p;
  p.max_tokens = max_tokens;
  p.eos_ids = {kEos};
  p.pad_id = kPad;
  p.pins = std::move(pins);
  p.seed = 3;
  p.logprobs = true;
  p.top_logprobs = 2;
  return p;
}

// Row p: the argmax then id 50 + p, with log-probabilities -p and -p - 1.
TopAlternatives alternatives(const std::vector<int32_t>& argmax) {
  TopAlternatives t;
  t.n = 2;
  for (int p = 0; p < kC; ++p) {
    t.ids.insert(t.ids.end(), {argmax[p], 50 + p});
    t.logprobs.insert(t.logprobs.end(), {-static_cast<float>(p), -static_cast<float>(p) - 1});
  }
  return t;
}

TEST(CommitAlternatives, RowsFollowTheReturnedTokens) {
  Sequence s(1, {5}, params({}, 16), kC, kVocab);
  const std::vector<int32_t> argmax = {20, 21, kEos, 23};
  const CanvasCommit c = s.commit(argmax, {0, -1, -2, -3}, 0, alternatives(argmax));
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{20, 21}));
  EXPECT_EQ(c.top.n, 2);
  EXPECT_EQ(c.top.ids, (std::vector<int32_t>{20, 50, 21, 51}));
  EXPECT_EQ(c.top.logprobs, (std::vector<float>{0, -1, -1, -2}));
}

TEST(CommitAlternatives, APinnedTokenIsItsOwnOnlyAlternative) {
  // Answer positions 2, 3 pinned to {30, 31}; position 1 is filler (EOS inside the gap): dropped.
  Sequence s(1, {5}, params({{2, {30, 31}}}, 4), kC, kVocab);
  const std::vector<int32_t> argmax = {20, kEos, 98, 99};
  const CanvasCommit c = s.commit(argmax, {0, -1, -2, -3}, 0, alternatives(argmax));
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{20, 30, 31}));
  EXPECT_EQ(c.top.ids, (std::vector<int32_t>{20, 50, 30, -1, 31, -1}));
  EXPECT_EQ(c.top.logprobs, (std::vector<float>{0, -1, 0, 0, 0, 0}));
}

TEST(CommitAlternatives, ARunnerWithoutAlternativesGivesNone) {
  Sequence s(1, {5}, params({}, 16), kC, kVocab);
  const CanvasCommit c = s.commit({20, 21, 22, 23}, {0, -1, -2, -3}, 0);
  EXPECT_EQ(c.tokens.size(), 4u);
  EXPECT_EQ(c.top.n, 0);
  EXPECT_TRUE(c.top.ids.empty());
}

}  // namespace
}  // namespace dgemma
