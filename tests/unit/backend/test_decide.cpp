// The decide op of the CPU backend (the reference the CUDA kernel is checked against on the GPU
// machine): acceptance by the entropy bound, renoising with the counter-based RNG, greedy, the
// same-argmax and confidence flags, and argument validation.
#include <gtest/gtest.h>

#include <vector>

#include "backend/backend.h"
#include "backend/decide_rules.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {
namespace {

struct DecideFixture {
  explicit DecideFixture(std::vector<float> h, std::vector<int32_t> am, std::vector<int32_t> sm)
      : entropy(std::move(h)), argmax(std::move(am)), sample(std::move(sm)) {
    const int64_t C = static_cast<int64_t>(entropy.size());
    prev.assign(entropy.size(), -7);
    canvas.assign(entropy.size(), -1);
    accept.assign(entropy.size(), 9);
    a.entropy = borrow_tensor(entropy.data(), ScalarType::kF32, {C});
    a.argmax = borrow_tensor(argmax.data(), ScalarType::kI32, {C});
    a.sample = borrow_tensor(sample.data(), ScalarType::kI32, {C});
    a.prev_argmax = borrow_tensor(prev.data(), ScalarType::kI32, {C});
    a.canvas = borrow_tensor(canvas.data(), ScalarType::kI32, {C});
    a.flags = borrow_tensor(flags, ScalarType::kI32, {2});
    a.accept = borrow_tensor(accept.data(), ScalarType::kU8, {C});
    a.vocab = 1000;
    a.renoise_key = rng::stream_key(3, 1, 2, rng::kRenoise);
  }
  std::vector<float> entropy;
  std::vector<int32_t> argmax, sample, prev, canvas;
  std::vector<uint8_t> accept;
  int32_t flags[2] = {-1, -1};
  DecideArgs a;
};

TEST(Decide, AcceptsTheBoundedPrefixAndRenoisesTheRest) {
  auto be = make_cpu_backend();
  // sorted: 0.01 (2), 0.02 (0), 0.05 (3), 0.5 (1), 0.9 (4); prefix sums before: 0, .01, .03, .08, .58
  DecideFixture f({0.02f, 0.5f, 0.01f, 0.05f, 0.9f}, {10, 11, 12, 13, 14}, {20, 21, 22, 23, 24});
  f.a.entropy_bound = 0.04f;
  f.a.confidence_threshold = 0.005f;
  be->decide(f.a);
  EXPECT_EQ(f.accept, (std::vector<uint8_t>{1, 0, 1, 1, 0}));
  EXPECT_EQ(f.accept, entropy_bound_accept(f.entropy, 0.04f));
  EXPECT_EQ(f.canvas[0], 20);
  EXPECT_EQ(f.canvas[2], 22);
  EXPECT_EQ(f.canvas[3], 23);
  EXPECT_EQ(f.canvas[1], static_cast<int32_t>(rng::uniform_token(f.a.renoise_key, 1, 1000)));
  EXPECT_EQ(f.canvas[4], static_cast<int32_t>(rng::uniform_token(f.a.renoise_key, 4, 1000)));
  EXPECT_EQ(f.flags[0], 0) << "no previous step: never the same argmax";
  EXPECT_EQ(f.flags[1], 0) << "mean entropy 0.296 is not below 0.005";
  EXPECT_EQ(f.prev, f.argmax) << "prev_argmax takes this step's argmax";
}

TEST(Decide, GreedyTakesTheArgmaxAndFlagsRepeatAndConfidence) {
  auto be = make_cpu_backend();
  DecideFixture f({0.001f, 0.002f, 0.0005f}, {5, 6, 7}, {1, 2, 3});
  f.a.greedy = true;
  f.a.entropy_bound = 1.0f;
  f.a.confidence_threshold = 0.005f;
  f.prev = {5, 6, 7};
  f.a.have_prev = true;
  be->decide(f.a);
  EXPECT_EQ(f.canvas, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(f.flags[0], 1);
  EXPECT_EQ(f.flags[1], 1);
  // One position differs from the previous argmax: not the same.
  f.prev = {5, 6, 8};
  be->decide(f.a);
  EXPECT_EQ(f.flags[0], 0);
  EXPECT_EQ(f.prev, (std::vector<int32_t>{5, 6, 7}));
}

TEST(Decide, TiesKeepPositionOrderAndTheMostConfidentIsAlwaysAccepted) {
  auto be = make_cpu_backend();
  // Equal entropies sort by position; with bound 0.25 positions 0..2 (sums 0, .1, .2) pass, 3 (.3) not.
  DecideFixture f({0.1f, 0.1f, 0.1f, 0.1f}, {0, 0, 0, 0}, {1, 2, 3, 4});
  f.a.entropy_bound = 0.25f;
  be->decide(f.a);
  EXPECT_EQ(f.accept, (std::vector<uint8_t>{1, 1, 1, 0}));
  f.a.entropy_bound = 0.0f;
  be->decide(f.a);
  EXPECT_EQ(f.accept, (std::vector<uint8_t>{1, 0, 0, 0})) << "the lowest (first) position: sum before it is 0";
}

TEST(Decide, RejectsBadArguments) {
  auto be = make_cpu_backend();
  DecideFixture f({0.1f, 0.2f}, {0, 1}, {0, 1});
  DecideArgs bad = f.a;
  bad.canvas = Tensor{};
  EXPECT_THROW(be->decide(bad), Error);
  bad = f.a;
  bad.flags = borrow_tensor(f.flags, ScalarType::kI32, {1});
  EXPECT_THROW(be->decide(bad), Error);
  bad = f.a;
  bad.argmax = borrow_tensor(f.sample.data(), ScalarType::kF32, {2});
  EXPECT_THROW(be->decide(bad), Error);
  bad = f.a;
  bad.vocab = 0;
  EXPECT_THROW(be->decide(bad), Error);
  std::vector<float> big(static_cast<size_t>(kMaxDecideCanvas) + 1, 0.f);
  bad = f.a;
  bad.entropy = borrow_tensor(big.data(), ScalarType::kF32, {kMaxDecideCanvas + 1});
  EXPECT_THROW(be->decide(bad), Error);
  EXPECT_EQ(f.canvas, (std::vector<int32_t>{-1, -1})) << "a rejected call writes nothing";
}

// The host-side rules themselves (decide_rules.h).
TEST(EntropyBound, AcceptsTheLowestEntropyPrefix) {
  // sorted: 0.01 (idx 2), 0.02 (idx 0), 0.05 (idx 3), 0.5 (idx 1), 0.9 (idx 4)
  const std::vector<float> h = {0.02f, 0.5f, 0.01f, 0.05f, 0.9f};
  // prefix sums before each: 0, 0.01, 0.03, 0.08, 0.58
  EXPECT_EQ(entropy_bound_accept(h, 0.1), (std::vector<uint8_t>{1, 1, 1, 1, 0}));
  EXPECT_EQ(entropy_bound_accept(h, 0.02), (std::vector<uint8_t>{1, 0, 1, 0, 0}));
  // The most confident position is always accepted, even with a tiny bound.
  EXPECT_EQ(entropy_bound_accept(h, 1e-9), (std::vector<uint8_t>{0, 0, 1, 0, 0}));
}

TEST(Confidence, MeanEntropyBelowThreshold) {
  EXPECT_TRUE(is_confident(std::vector<float>{0.001f, 0.002f}, 0.005));
  EXPECT_FALSE(is_confident(std::vector<float>{0.001f, 0.02f}, 0.005));
}

}  // namespace
}  // namespace dgemma
