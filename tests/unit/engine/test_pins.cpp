// Pinned spans in the engine (docs/MODEL.md §6.6): validation in resolve_sequence_params, the
// per-canvas view, the initial canvas, and the commit's trimming (gap filler dropped before the last
// pinned position, the normal rules after it, pinned tokens never end an answer).
#include <gtest/gtest.h>

#include <string>

#include <cmath>

#include "engine/denoise_policy.h"
#include "engine/params.h"
#include "engine/pins.h"
#include "engine/sequence.h"
#include "util/error.h"

namespace dgemma {
namespace {

constexpr int kC = 8;
constexpr int kVocab = 100;
constexpr int32_t kEos = 1, kPad = 0, kStop = 9;

std::string refused(const SamplingParams& p) {
  GenerationConfig g;
  g.eos_token_ids = {kEos};
  ParamsContext ctx;
  ctx.canvas_length = kC;
  ctx.vocab_size = kVocab;
  try {
    (void)resolve_sequence_params(p, g, ctx);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    return e.param() + ": " + e.what();
  }
  return "accepted";
}

TEST(Pins, ValidatedWithTheirParameterNamed) {
  SamplingParams p;
  p.max_tokens = 20;
  p.pins = {{2, {5, 6}}, {4, {7}}, {19, {8}}};
  EXPECT_EQ(refused(p), "accepted") << "adjacent spans and a span ending at max_tokens are fine";
  auto refuse = [&](std::vector<PinnedSpan> pins, const std::string& what) {
    p.pins = std::move(pins);
    const std::string r = refused(p);
    EXPECT_EQ(r.rfind("pins: ", 0), 0u) << r;
    EXPECT_NE(r.find(what), std::string::npos) << r;
  };
  refuse({{2, {5, 6}}, {3, {7}}}, "must not overlap");
  refuse({{6, {5}}, {2, {7}}}, "sorted by offset");
  refuse({{19, {5, 6}}}, "beyond max_tokens = 20");
  refuse({{25, {5}}}, "beyond max_tokens");
  refuse({{-1, {5}}}, "must not be negative");
  refuse({{3, {}}}, "at least one token");
  refuse({{3, {kVocab}}}, "invalid token id 100");
  refuse({{3, {-4}}}, "invalid token id -4");
}

TEST(Pins, CanvasViewSplitsSpansAcrossCanvasesAndMergesAdjacentOnes) {
  const std::vector<PinnedSpan> pins = {{1, {11, 12}}, {3, {13}}, {6, {14, 15, 16, 17}}};
  const CanvasPins c0 = canvas_pins(pins, 0, kC);
  EXPECT_EQ(c0.mask, (std::vector<uint8_t>{0, 1, 1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(c0.tokens, (std::vector<int32_t>{0, 11, 12, 13, 0, 0, 14, 15}));
  EXPECT_EQ(c0.runs, (std::vector<std::pair<int, int>>{{1, 4}, {6, 8}}));
  const CanvasPins c1 = canvas_pins(pins, 1, kC);
  EXPECT_EQ(c1.runs, (std::vector<std::pair<int, int>>{{0, 2}}));
  EXPECT_EQ(c1.tokens[0], 16);
  EXPECT_EQ(c1.tokens[1], 17);
  EXPECT_TRUE(canvas_pins(pins, 2, kC).empty());
  EXPECT_TRUE(canvas_pins(pins, 2, kC).mask.empty()) << "a canvas without pins carries no mask";
  EXPECT_EQ(pins_end(pins), 10);
}

SequenceParams params(std::vector<PinnedSpan> pins, int64_t max_tokens) {
  SequenceParams p;
  p.max_tokens = max_tokens;
  p.eos_ids = {kEos};
  p.stop_ids = {kStop};
  p.pad_id = kPad;
  p.pins = std::move(pins);
  p.seed = 3;
  p.logprobs = true;
  return p;
}

TEST(Pins, InitialCanvasHoldsThePinnedTokens) {
  SequenceParams p = params({{6, {40, 41, 42}}}, 16);
  Sequence plain(1, {5, 5}, params({}, 16), kC, kVocab);
  Sequence s(1, {5, 5}, p, kC, kVocab);
  std::vector<int32_t> want = plain.initial_canvas();
  want[6] = 40;
  want[7] = 41;
  EXPECT_EQ(s.initial_canvas(), want) << "the same random canvas, pinned positions overwritten";
  p.initial_canvas = {9, 9, 9, 9, 9, 9, 9, 9};
  Sequence with_ids(1, {5, 5}, p, kC, kVocab);
  EXPECT_EQ(with_ids.initial_canvas(), (std::vector<int32_t>{9, 9, 9, 9, 9, 9, 40, 41}));
  // The second canvas: its own random tokens, with the span's tail.
  (void)s.commit({20, 21, 22, 23, 24, 25, 26, 27}, std::vector<float>(kC, -0.5f), 0);
  EXPECT_EQ(s.canvas_pins().runs, (std::vector<std::pair<int, int>>{{0, 1}}));
  EXPECT_EQ(s.initial_canvas()[0], 42);
}

TEST(Pins, FillerBeforeTheLastPinIsDroppedAndTheAnswerEndsThere) {
  // A gap of room 5 before a pinned suffix at [5, 8), max_tokens = 8: the model closed the gap after
  // two tokens (EOS, then pads and a stop id) — all filler, dropped. A pinned EOS id is kept.
  Sequence s(1, {5}, params({{5, {30, kEos, 32}}}, 8), kC, kVocab);
  const std::vector<float> lp = {-1, -2, -3, -4, -5, -6, -7, -8};
  // Argmax at pinned positions is whatever the model said; the commit takes the pinned tokens.
  const CanvasCommit c = s.commit({20, 21, kEos, kPad, kStop, 99, 98, 97}, lp, 0);
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{20, 21, 30, kEos, 32}));
  EXPECT_EQ(c.pinned, (std::vector<uint8_t>{0, 0, 1, 1, 1}));
  EXPECT_EQ(c.logprobs, (std::vector<float>{-1, -2, 0, 0, 0})) << "pinned tokens: log-probability 0 (given)";
  EXPECT_TRUE(c.finished);
  EXPECT_EQ(s.finish_reason(), FinishReason::kStop) << "an answer ending at its last pin is complete";
  EXPECT_EQ(s.stop_token_id(), -1) << "a filler stop id is not the answer's stop";
}

TEST(Pins, AfterTheLastPinTheNormalRulesApply) {
  // Pinned prefix [0, 2); max_tokens 16 (two canvases). An EOS after the prefix ends the answer.
  Sequence s(1, {5}, params({{0, {40, 41}}}, 16), kC, kVocab);
  CanvasCommit c = s.commit({3, 3, 22, 23, kEos, 25, 26, 27}, std::vector<float>(kC, -1), 0);
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{40, 41, 22, 23}));
  EXPECT_TRUE(c.finished);
  EXPECT_EQ(s.finish_reason(), FinishReason::kStop);

  // No EOS: the whole canvas goes on (pins applied in the history), the next canvas ends at max_tokens.
  Sequence t(2, {5}, params({{0, {40, 41}}}, 12), kC, kVocab);
  c = t.commit({3, 3, 22, 23, 24, 25, 26, 27}, std::vector<float>(kC, -1), 0);
  EXPECT_FALSE(c.finished);
  EXPECT_EQ(t.history(), (std::vector<int32_t>{5, 40, 41, 22, 23, 24, 25, 26, 27}));
  EXPECT_TRUE(t.canvas_pins().empty());
  c = t.commit({30, 31, 32, 33, 34, 35, 36, 37}, std::vector<float>(kC, -1), 0);
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{30, 31, 32, 33}));
  EXPECT_EQ(t.finish_reason(), FinishReason::kLength) << "max_tokens beyond the last pin: length, as without pins";
  EXPECT_EQ(t.output().size(), 12u);
}

TEST(Pins, GapsAcrossCanvasesKeepAnswerPositions) {
  // Pins at answer positions 2 and 12 (canvas 1); max_tokens 13. Canvas 0 ends its gap early with pads:
  // dropped, but the answer positions (not the output count) place canvas 1 and the cap.
  Sequence s(1, {5}, params({{2, {40}}, {12, {41}}}, 13), kC, kVocab);
  CanvasCommit c = s.commit({20, kEos, 0, 23, kPad, kPad, kPad, kPad}, std::vector<float>(kC, -1), 0);
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{20, 40, 23}));
  EXPECT_FALSE(c.finished) << "an EOS before the last pin does not end the answer";
  c = s.commit({50, 51, kEos, kPad, 54, 55, 56, 57}, std::vector<float>(kC, -1), 0);
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{50, 51, 41})) << "answer position 12 is pinned, 13 is past max_tokens";
  EXPECT_EQ(c.pinned, (std::vector<uint8_t>{0, 0, 1}));
  EXPECT_EQ(s.finish_reason(), FinishReason::kStop);
  EXPECT_EQ(s.output(), (std::vector<int32_t>{20, 40, 23, 50, 51, 41}));
}

TEST(Pins, TraceMarginsFollowThePinnedRule) {
  const std::vector<float> h = {0.02f, 0.5f, 0.01f, 0.05f};
  const std::vector<uint8_t> mask = {0, 0, 1, 0};
  const std::vector<float> m = entropy_bound_margins(h, 0.04f, mask);
  const std::vector<float> sub = entropy_bound_margins(std::vector<float>{0.02f, 0.5f, 0.05f}, 0.04f);
  EXPECT_EQ(m[0], sub[0]);
  EXPECT_EQ(m[1], sub[1]);
  EXPECT_EQ(m[3], sub[2]);
  EXPECT_TRUE(std::isinf(m[2])) << "a pinned decision is never a near-tie";
  EXPECT_EQ(entropy_bound_margins(h, 0.04f, {}), entropy_bound_margins(h, 0.04f));
}

TEST(Pins, WithoutPinsNothingChanges) {
  Sequence s(1, {5}, params({}, 6), kC, kVocab);
  const CanvasCommit c = s.commit({kPad, 21, 22, 23, 24, 25, 26, 27}, std::vector<float>(kC, -1), 0);
  EXPECT_EQ(c.tokens, (std::vector<int32_t>{kPad, 21, 22, 23, 24, 25})) << "a pad is an ordinary token";
  EXPECT_TRUE(c.pinned.empty());
  EXPECT_EQ(s.finish_reason(), FinishReason::kLength);
  Sequence t(1, {5}, params({}, 6), kC, kVocab);
  (void)t.commit({20, 21, 22, 23, 24, 25, kEos, 27}, std::vector<float>(kC, -1), 0);
  EXPECT_EQ(t.finish_reason(), FinishReason::kStop) << "an EOS right after the cap: stop";
}

}  // namespace
}  // namespace dgemma
