// The denoising policy (docs/MODEL.md §6): temperature schedule, stability run, initial canvas, acceptance
// margins, and the counter-based RNG (vectors from tools/golden/dgemma_rng.py).
#include <gtest/gtest.h>

#include "engine/denoise_policy.h"
#include "engine/sequence.h"
#include "util/counter_rng.h"

namespace dgemma {
namespace {

TEST(CounterRng, MatchesThePythonMirror) {
  // python3 tools/golden/dgemma_rng.py prints these.
  EXPECT_EQ(rng::stream_key(0, 0, 0, 1), 0x2f32a78496c67c60ull);
  EXPECT_EQ(rng::bits(0x2f32a78496c67c60ull, 0, 5), 0x34022ff41e91656dull);
  EXPECT_EQ(rng::bits(0x2f32a78496c67c60ull, 255, 5), 0x718ecb04d5905efcull);
  const uint64_t k2 = rng::stream_key(42, 3, 7, 2);
  EXPECT_EQ(k2, 0xc3c682af900dc4d8ull);
  EXPECT_EQ(rng::uniform_token(k2, 0, 262144), 251701u);
  EXPECT_EQ(rng::uniform_token(k2, 3, 262144), 213175u);
  const uint64_t k3 = rng::stream_key(~0ull, 1, 47, 3);
  EXPECT_EQ(k3, 0xc0517a4fe7831cd9ull);
  EXPECT_DOUBLE_EQ(rng::gumbel(k3, 0, 1), 0.8094815823082182);
  EXPECT_DOUBLE_EQ(rng::gumbel(k3, 0, 0), -0.2905910141090521);
}

TEST(Temperature, LinearScheduleLikeTheReference) {
  DiffusionParams p;  // 48 steps, 0.4 .. 0.8
  EXPECT_FLOAT_EQ(temperature_at(p, 0), 0.8f);
  EXPECT_FLOAT_EQ(temperature_at(p, 47), 0.4f + 0.4f / 48.0f);
  EXPECT_GT(temperature_at(p, 10), temperature_at(p, 11));
}

TEST(EntropyBound, MarginsAreTheDistanceOfEachDecisionFromTheBound) {
  // sorted: 0.01 (idx 2), 0.02 (idx 0), 0.05 (idx 3), 0.5 (idx 1), 0.9 (idx 4); prefix sums before
  // each: 0, 0.01, 0.03, 0.08, 0.58 (fp32).
  const std::vector<float> h = {0.02f, 0.5f, 0.01f, 0.05f, 0.9f};
  const std::vector<float> m = entropy_bound_margins(h, 0.1f);
  ASSERT_EQ(m.size(), h.size());
  EXPECT_FLOAT_EQ(m[2], 0.1f);
  EXPECT_FLOAT_EQ(m[0], 0.09f);
  EXPECT_FLOAT_EQ(m[3], 0.07f);
  EXPECT_FLOAT_EQ(m[1], 0.02f);
  EXPECT_FLOAT_EQ(m[4], 0.48f);
}

TEST(Stability, NeverStableOnTheFirstStep) {
  // The flag is decide's "argmax equals the previous step's" (false on a canvas's first step).
  StabilityRun t(1);
  EXPECT_FALSE(t.update(false));  // step 0: a
  EXPECT_TRUE(t.update(true));    // a again
  EXPECT_FALSE(t.update(false));  // b
  StabilityRun t2(2);             // the argmax must equal each of the previous two
  EXPECT_FALSE(t2.update(false));
  EXPECT_FALSE(t2.update(true));
  EXPECT_TRUE(t2.update(true));
  EXPECT_TRUE(t2.update(true));
  EXPECT_FALSE(t2.update(false));
  EXPECT_FALSE(t2.update(true)) << "only one repeat since the change";
  StabilityRun t0(0);
  EXPECT_TRUE(t0.update(false)) << "threshold 0 means always stable";
}

// What the runner reads back for a step follows the stop rule before the step is counted:
// Sequence::last_step (and StabilityRun::stable_after) answer what on_step (update) then returns.
TEST(Stability, LastStepPredictsTheStopRule) {
  SequenceParams p;
  p.diffusion.max_denoising_steps = 6;
  p.diffusion.stability_threshold = 2;
  Sequence s(1, {5, 6}, p, 4, 100);
  const bool flags[][2] = {{false, true}, {true, false}, {true, true}, {false, true}, {true, true}, {true, true}};
  for (const auto& f : flags) {
    const bool predicted = s.last_step(f[0], f[1]);
    EXPECT_EQ(predicted, s.on_step(f[0], f[1])) << "step " << s.step();
    if (predicted) break;
  }
  EXPECT_EQ(s.step(), 3) << "stable twice in a row and confident at the third step";
  Sequence capped(2, {5}, p, 4, 100);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(capped.last_step(false, true));
  for (int i = 0; i < 5; ++i) capped.on_step(false, true);
  EXPECT_TRUE(capped.last_step(false, false)) << "the step cap";
}

TEST(RandomCanvas, UniformOverTheVocabulary) {
  const auto c = random_canvas(5, 0, 0, rng::kInitCanvas, 4096, 1000);
  std::vector<int> hist(10);
  for (int32_t t : c) {
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 1000);
    hist[t / 100]++;
  }
  for (int h : hist) EXPECT_NEAR(h, 409.6, 80);  // ~4 sigma
  EXPECT_NE(c, random_canvas(5, 1, 0, rng::kInitCanvas, 4096, 1000));
}

}  // namespace
}  // namespace dgemma
