// Guided decoding in the engine and the CPU reference ops (engine/guided_answer.h, backend.h
// GuidedGap): the committed canvas keeps the longest valid prefix whose completion fits, closes the
// value at the region's last canvas (or where the model ended it), carries the automaton state to the
// next canvas with as much of the completion as the later room needs; the sampler sees only the gap
// mask's tokens in the gap's rows and is bit-identical elsewhere; decide renoises after the prefix.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/decide_rules.h"
#include "engine/guided_answer.h"
#include "engine/guided_tables.h"
#include "guided/guided.h"
#include "guided/token_constraint.h"
#include "util/bf16.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {
namespace {

using guided::TokenKind;

// Ids: 0 <pad> and 1 <eos> (fillers), 2 "a", 3 "b", 4 "ab", 5 "x", 6 <ctl> (never), 7.. filler text.
enum : int32_t { kPad = 0, kEos = 1, kA = 2, kB = 3, kAB = 4, kX = 5, kCtl = 6 };
constexpr int kVocab = 64;

std::shared_ptr<const guided::TokenVocabulary> vocabulary() {
  std::vector<std::string> pieces = {"", "", "a", "b", "ab", "x", ""};
  std::vector<TokenKind> kinds = {TokenKind::kFiller, TokenKind::kFiller, TokenKind::kText, TokenKind::kText,
                                  TokenKind::kText,   TokenKind::kText,   TokenKind::kNever};
  while (pieces.size() < kVocab) {
    pieces.push_back("y" + std::to_string(pieces.size()));
    kinds.push_back(TokenKind::kText);
  }
  return guided::TokenVocabulary::from_pieces(pieces, kinds);
}

std::shared_ptr<const guided::TokenConstraint> regex(const std::string& pattern) {
  static const auto vocab = vocabulary();
  return guided::compile_for_vocabulary(guided::ConstraintSpec::regex(pattern), vocab);
}

GuidedAnswer answer(const std::string& pattern, int64_t begin, int64_t end) {
  GuidedAnswer g;
  g.constraint = regex(pattern);
  g.begin = begin;
  g.end = end;
  return g;
}

TEST(GuidedAnswer, TheLastCanvasKeepsTheValidPrefixAndClosesTheValue) {
  const GuidedAnswer g = answer("(ab)+", 0, 8);
  std::vector<int32_t> canvas = {kA, kB, kEos, kA, kX, kA, kB, kPad};
  const GuidedCommit c = guide_canvas(g, 0, g.constraint->start(), canvas, kPad);
  // "ab", filler, "a" are kept (the filler becomes pad), "x" is not; the completion "b" follows.
  EXPECT_EQ(canvas, (std::vector<int32_t>{kA, kB, kPad, kA, kB, kPad, kPad, kPad}));
  EXPECT_TRUE(c.done);
  EXPECT_EQ(c.value_end, 5);
  EXPECT_TRUE(g.constraint->accepting(c.state));
}

TEST(GuidedAnswer, TheStateGoesOnInTheNextCanvasAndTheModelMayEndTheValue) {
  const GuidedAnswer g = answer("(ab)+", 0, 16);
  std::vector<int32_t> c0 = {kAB, kAB, kA, kB, kAB, kAB, kAB, kA};  // valid, ends mid-value
  const GuidedCommit r0 = guide_canvas(g, 0, g.constraint->start(), c0, kPad);
  EXPECT_FALSE(r0.done);
  EXPECT_EQ(c0, (std::vector<int32_t>{kAB, kAB, kA, kB, kAB, kAB, kAB, kA}));
  EXPECT_FALSE(g.constraint->accepting(r0.state));
  // The next canvas starts in that state: "b" completes it, then filler ends it.
  std::vector<int32_t> c1 = {kB, kPad, kPad, kPad, kPad, kPad, kPad, kEos};
  const GuidedCommit r1 = guide_canvas(g, 1, r0.state, c1, kPad);
  EXPECT_TRUE(r1.done);
  EXPECT_EQ(c1, (std::vector<int32_t>{kB, kPad, kPad, kPad, kPad, kPad, kPad, kPad}));
  // A canvas of filler alone from the start state closes with the shortest value.
  std::vector<int32_t> only_pad(8, kPad);
  const GuidedCommit r2 = guide_canvas(g, 0, g.constraint->start(), only_pad, kPad);
  EXPECT_TRUE(r2.done);
  ASSERT_EQ(g.constraint->completion_bytes(g.constraint->start()), "ab");
  EXPECT_EQ(r2.value_end,
            static_cast<int64_t>(g.constraint->completion_tokens(g.constraint->start())->size()));
}

TEST(GuidedAnswer, AValueLongerThanItsCanvasGetsTheCompletionTheLaterRoomNeeds) {
  // a{6} in answer positions [0, 6) with canvases of 4: after canvas 0 only 2 positions remain, so
  // canvas 0 must hold at least 4 a's whatever the model wrote.
  const GuidedAnswer g = answer("a{6}", 0, 6);
  std::vector<int32_t> c0 = {kB, kX, kB, kB};
  const GuidedCommit r0 = guide_canvas(g, 0, g.constraint->start(), c0, kPad);
  EXPECT_FALSE(r0.done);
  EXPECT_EQ(c0, (std::vector<int32_t>{kA, kA, kA, kA}));
  EXPECT_EQ(g.constraint->completion_length(r0.state), 2);
  std::vector<int32_t> c1 = {kX, kA, kB, kB};  // only positions 4, 5 belong to the region
  const GuidedCommit r1 = guide_canvas(g, 1, r0.state, c1, kPad);
  EXPECT_TRUE(r1.done);
  EXPECT_EQ(r1.value_end, 6);
  EXPECT_EQ(c1[0], kA);
  EXPECT_EQ(c1[1], kA);
  // The walk keeps no prefix whose completion would not fit: "ab" needs room for "ab" more at least.
  const GuidedAnswer tight = answer("(ab){2}", 0, 4);
  std::vector<int32_t> c = {kA, kPad, kPad, kB};  // "a" + fillers leaves 1 position for "bab"
  const GuidedCommit r = guide_canvas(tight, 0, tight.constraint->start(), c, kPad);
  EXPECT_TRUE(r.done);
  EXPECT_TRUE(tight.constraint->accepting(r.state));
  std::string text;
  for (int32_t t : c) text += std::string(tight.constraint->vocabulary().bytes(t));
  EXPECT_EQ(text, "abab");
}

TEST(GuidedAnswer, PinnedTextIsNotHeldToTheRoomRuleAndCarriesTheValueAcrossCanvases) {
  // (ab){6} fully pinned as six "ab" tokens in answer positions [0, 6), canvases of 4: after canvas 0
  // 4 bytes remain for 2 positions (the room rule counts a byte per position), which the pins of
  // canvas 1 fill.
  GuidedAnswer g = answer("(ab){6}", 0, 6);
  std::vector<PinnedSpan> pins = {PinnedSpan{0, std::vector<int32_t>(6, kAB)}};
  EXPECT_NO_THROW(validate_guided_answer(g, pins, 6, kVocab));
  EXPECT_THROW(validate_guided_answer(g, {}, 6, kVocab), Error);  // unpinned, 12 bytes need 12 positions
  const std::vector<uint8_t> mask(4, 1);
  std::vector<int32_t> c0(4, kAB);
  const GuidedCommit r0 = guide_canvas(g, 0, g.constraint->start(), c0, kPad, mask);
  EXPECT_FALSE(r0.done);
  EXPECT_EQ(c0, std::vector<int32_t>(4, kAB));
  std::vector<int32_t> c1 = {kAB, kAB, kX, kX};
  const std::vector<uint8_t> mask1 = {1, 1, 0, 0};
  const GuidedCommit r1 = guide_canvas(g, 1, r0.state, c1, kPad, mask1);
  EXPECT_TRUE(r1.done);
  EXPECT_EQ(r1.value_end, 6);
}

TEST(GuidedAnswer, ValidationNeedsRoomForTheShortestValue) {
  GuidedAnswer g = answer("a{6}", 2, 7);
  EXPECT_THROW(validate_guided_answer(g, {}, 7, kVocab), Error);  // 5 positions for 6 bytes
  g.end = 8;
  EXPECT_NO_THROW(validate_guided_answer(g, {}, 8, kVocab));
  g.suffix = {kA};
  EXPECT_THROW(validate_guided_answer(g, {}, 8, kVocab), Error);      // the suffix must fit too
  EXPECT_THROW(validate_guided_answer(g, {}, 9, kVocab - 1), Error);  // a larger vocabulary than the model's
}

TEST(GuidedAnswer, SegmentsAreTheRegionsPositionsInEachCanvas) {
  const GuidedAnswer g = answer("a+", 3, 13);
  GuidedSegment s = guided_segment(g, 0, 8);
  EXPECT_EQ(s.first, 3);
  EXPECT_EQ(s.last, 8);
  EXPECT_EQ(s.room, 10);
  s = guided_segment(g, 1, 8);
  EXPECT_EQ(s.first, 0);
  EXPECT_EQ(s.last, 5);
  EXPECT_EQ(s.room, 5);
  EXPECT_TRUE(guided_segment(g, 2, 8).empty());
}

// ---- the CPU reference ops ----

struct SamplerRun {
  std::vector<uint16_t> logits;
  std::vector<float> entropy, logprob;
  std::vector<int32_t> argmax, sample;
  SamplerArgs a;
  SamplerRun(const std::vector<uint16_t>& l, int64_t C)
      : logits(l), entropy(C), logprob(C), argmax(C), sample(C) {
    a.logits = borrow_tensor(logits.data(), ScalarType::kBF16, {C, kVocab});
    a.entropy = borrow_tensor(entropy.data(), ScalarType::kF32, {C});
    a.argmax = borrow_tensor(argmax.data(), ScalarType::kI32, {C});
    a.sample = borrow_tensor(sample.data(), ScalarType::kI32, {C});
    a.argmax_logprob = borrow_tensor(logprob.data(), ScalarType::kF32, {C});
    a.temperature = 0.7f;
    a.sample_key = rng::stream_key(3, 0, 2, rng::kSample);
  }
};

TEST(GuidedOps, TheSamplerSeesOnlyTheGapMaskInTheGapAndIsUnchangedElsewhere) {
  auto be = make_cpu_backend();
  const auto c = regex("(ab|x)+");
  GuidedTableCache cache;
  const GuidedTables& t = cache.get(*be, c);
  const int64_t C = 4;
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 3.0f);
  std::vector<uint16_t> logits(static_cast<size_t>(C * kVocab));
  for (auto& v : logits) v = f32_to_bf16(n(rng));
  SamplerRun plain(logits, C), masked(logits, C);
  masked.a.guided = GuidedGap{&t, 1, 3, c->start(), 3};
  be->sampler(plain.a);
  be->sampler(masked.a);
  const auto& mask = c->gap_mask();
  auto allowed = [&](int32_t id) { return ((mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u) != 0; };
  for (int64_t p = 0; p < C; ++p) {
    const size_t P = static_cast<size_t>(p);
    if (p == 0 || p == 3) {  // outside the gap: the same bits
      EXPECT_EQ(plain.entropy[P], masked.entropy[P]);
      EXPECT_EQ(plain.argmax[P], masked.argmax[P]);
      EXPECT_EQ(plain.sample[P], masked.sample[P]);
      for (int v = 0; v < kVocab; ++v) EXPECT_EQ(plain.logits[P * kVocab + v], masked.logits[P * kVocab + v]);
      continue;
    }
    EXPECT_TRUE(allowed(masked.argmax[P]));
    EXPECT_TRUE(allowed(masked.sample[P]));
    // Entropy and probabilities of the allowed set (z = softcap tanh(l / cap) / T, in double).
    double zmax = -INFINITY;
    std::vector<double> z(kVocab, -INFINITY);
    for (int v = 0; v < kVocab; ++v)
      if (allowed(v)) {
        const double s = 30.0 * std::tanh(static_cast<double>(bf16_to_f32(logits[P * kVocab + v])) / 30.0);
        z[static_cast<size_t>(v)] = s / 0.7;
        zmax = std::max(zmax, z[static_cast<size_t>(v)]);
      }
    double sum = 0, h = 0;
    for (int v = 0; v < kVocab; ++v)
      if (allowed(v)) sum += std::exp(z[static_cast<size_t>(v)] - zmax);
    for (int v = 0; v < kVocab; ++v)
      if (allowed(v)) {
        const double q = std::exp(z[static_cast<size_t>(v)] - zmax) / sum;
        h -= q * std::log(q);
      }
    EXPECT_NEAR(masked.entropy[P], h, 1e-5);  // fp32 z vs double here
    for (int v = 0; v < kVocab; ++v)
      if (!allowed(v)) {
        EXPECT_EQ(bf16_to_f32(masked.logits[P * kVocab + v]), 0.0f) << v;  // no probability
      }
  }
}

TEST(GuidedOps, DecideRenoisesThePositionsAfterTheLongestValidPrefix) {
  auto be = make_cpu_backend();
  const auto c = regex("(ab)+");
  GuidedTableCache cache;
  const GuidedTables& t = cache.get(*be, c);
  const int64_t C = 6;
  std::vector<float> entropy(C, 0.0f);  // everything passes the entropy bound
  std::vector<int32_t> argmax = {kA, kB, kPad, kX, kA, kB}, sample = argmax, prev(C, 0), canvas(C, -1);
  std::vector<uint8_t> accept(C, 9);
  int32_t flags[2];
  DecideArgs a;
  a.entropy = borrow_tensor(entropy.data(), ScalarType::kF32, {C});
  a.argmax = borrow_tensor(argmax.data(), ScalarType::kI32, {C});
  a.sample = borrow_tensor(sample.data(), ScalarType::kI32, {C});
  a.prev_argmax = borrow_tensor(prev.data(), ScalarType::kI32, {C});
  a.canvas = borrow_tensor(canvas.data(), ScalarType::kI32, {C});
  a.flags = borrow_tensor(flags, ScalarType::kI32, {2});
  a.accept = borrow_tensor(accept.data(), ScalarType::kU8, {C});
  a.vocab = kVocab;
  a.renoise_key = rng::stream_key(5, 0, 1, rng::kRenoise);
  a.guided = GuidedGap{&t, 0, C, c->start(), C};
  be->decide(a);
  auto renoise = [&](int p) {
    return static_cast<int32_t>(rng::uniform_token(a.renoise_key, static_cast<uint32_t>(p), kVocab));
  };
  EXPECT_EQ(accept, (std::vector<uint8_t>{1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(canvas, (std::vector<int32_t>{kA, kB, kPad, renoise(3), renoise(4), renoise(5)}));
  // No gap: the plain rule (everything accepted).
  a.guided = GuidedGap{};
  be->decide(a);
  EXPECT_EQ(canvas, sample);
}

}  // namespace
}  // namespace dgemma
