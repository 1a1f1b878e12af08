// A committed canvas of nothing but pad ends the answer with finish "stop" and returns no token (the
// reference would keep appending pad canvases, which give no text, until max_tokens); a canvas with
// text before its pads, a pad canvas inside a pinned layout, and ignore_eos go on as before.
#include <gtest/gtest.h>

#include <vector>

#include "engine/sequence.h"

namespace dgemma {
namespace {

constexpr int kC = 4;
constexpr int kVocab = 100;
constexpr int32_t kEos = 1, kPad = 0;

SequenceParams params(int64_t max_tokens, std::vector<PinnedSpan> pins = {}) {
  SequenceParams p;
  p.max_tokens = max_tokens;
  p.eos_ids = {kEos};
  p.pad_id = kPad;
  p.pins = std::move(pins);
  p.seed = 3;
  return p;
}

const std::vector<float> kNoLogprobs;

TEST(PadCanvas, AllPadEndsTheAnswerAsStop) {
  Sequence s(1, {5}, params(100), kC, kVocab);
  CanvasCommit c = s.commit({20, 21, kPad, kPad}, kNoLogprobs, 0);
  EXPECT_EQ(c.tokens,
            (std::vector<int32_t>{20, 21, kPad, kPad}));  // pads after text: returned, the answer goes on
  EXPECT_FALSE(c.finished);
  c = s.commit({kPad, kPad, kPad, kPad}, kNoLogprobs, 0);
  EXPECT_TRUE(c.tokens.empty());
  EXPECT_TRUE(c.finished);
  EXPECT_EQ(s.finish_reason(), FinishReason::kStop);
  EXPECT_EQ(s.output(), (std::vector<int32_t>{20, 21, kPad, kPad}));
}

TEST(PadCanvas, AFirstCanvasOfPadIsAnEmptyAnswer) {
  Sequence s(1, {5}, params(100), kC, kVocab);
  const CanvasCommit c = s.commit({kPad, kPad, kPad, kPad}, kNoLogprobs, 0);
  EXPECT_TRUE(c.finished);
  EXPECT_TRUE(s.output().empty());
  EXPECT_EQ(s.finish_reason(), FinishReason::kStop);
}

TEST(PadCanvas, IgnoreEosGoesOn) {
  SequenceParams p = params(100);
  p.ignore_eos = true;
  Sequence s(1, {5}, p, kC, kVocab);
  const CanvasCommit c = s.commit({kPad, kPad, kPad, kPad}, kNoLogprobs, 0);
  EXPECT_FALSE(c.finished);
  EXPECT_EQ(c.tokens.size(), 4u);
}

TEST(PadCanvas, PadGapBeforeALaterPinIsFiller) {
  // Answer positions 4, 5 pinned: the first canvas's pads are a gap the model left empty, not the end.
  Sequence s(1, {5}, params(8, {{4, {30, 31}}}), kC, kVocab);
  CanvasCommit c = s.commit({kPad, kPad, kPad, kPad}, kNoLogprobs, 0);
  EXPECT_FALSE(c.finished);
  EXPECT_TRUE(c.tokens.empty());  // filler dropped
  c = s.commit({30, 31, kEos, kPad}, kNoLogprobs, 0);
  EXPECT_TRUE(c.finished);
  EXPECT_EQ(s.output(), (std::vector<int32_t>{30, 31}));
}

}  // namespace
}  // namespace dgemma
