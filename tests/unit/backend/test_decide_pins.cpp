// The decide op with pinned positions (docs/MODEL.md §6.6) on the CPU backend, and its rules
// (decide_rules.h): pinned positions are accepted and keep their token; the entropy bound, the
// confidence mean and the argmax comparison see only the free positions; no mask is the old rule.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/decide_rules.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {
namespace {

struct PinnedDecide {
  PinnedDecide(std::vector<float> h, std::vector<uint8_t> pins, std::vector<int32_t> pin_tok)
      : entropy(std::move(h)), mask(std::move(pins)), tokens(std::move(pin_tok)) {
    const int64_t C = static_cast<int64_t>(entropy.size());
    for (int64_t p = 0; p < C; ++p) {
      argmax.push_back(static_cast<int32_t>(100 + p));
      sample.push_back(static_cast<int32_t>(200 + p));
    }
    prev = argmax;
    canvas.assign(entropy.size(), -1);
    accept.assign(entropy.size(), 9);
    a.entropy = borrow_tensor(entropy.data(), ScalarType::kF32, {C});
    a.argmax = borrow_tensor(argmax.data(), ScalarType::kI32, {C});
    a.sample = borrow_tensor(sample.data(), ScalarType::kI32, {C});
    a.prev_argmax = borrow_tensor(prev.data(), ScalarType::kI32, {C});
    a.canvas = borrow_tensor(canvas.data(), ScalarType::kI32, {C});
    a.flags = borrow_tensor(flags, ScalarType::kI32, {2});
    a.accept = borrow_tensor(accept.data(), ScalarType::kU8, {C});
    a.pin_mask = borrow_tensor(mask.data(), ScalarType::kU8, {C});
    a.pin_tokens = borrow_tensor(tokens.data(), ScalarType::kI32, {C});
    a.vocab = 1000;
    a.renoise_key = rng::stream_key(5, 0, 1, rng::kRenoise);
  }
  int32_t renoise(int p) const { return static_cast<int32_t>(rng::uniform_token(a.renoise_key, static_cast<uint32_t>(p), 1000)); }
  std::vector<float> entropy;
  std::vector<uint8_t> mask;
  std::vector<int32_t> tokens, argmax, sample, prev, canvas;
  std::vector<uint8_t> accept;
  int32_t flags[2] = {-1, -1};
  DecideArgs a;
};

TEST(DecidePins, PinnedPositionsAreAcceptedAndLeftOutOfTheBound) {
  auto be = make_cpu_backend();
  // Unpinned, bound 0.025: sorted 0.01 (2), 0.02 (0), 0.05 (3) ... sums before 0, .01, .03: accepts 2, 0.
  // Pinning 2 takes its 0.01 out of the sum: free order 0.02 (0), 0.05 (3), 0.5 (1), 0.9 (4) with sums
  // before 0, .02, .07: accepts 0 and 3. Position 4 (entropy 0.9) is pinned too: accepted regardless.
  PinnedDecide f({0.02f, 0.5f, 0.01f, 0.05f, 0.9f}, {0, 0, 1, 0, 0}, {0, 0, 77, 0, 0});
  f.a.entropy_bound = 0.025f;
  EXPECT_EQ(entropy_bound_accept(f.entropy, 0.025f), (std::vector<uint8_t>{1, 0, 1, 0, 0}));
  be->decide(f.a);
  EXPECT_EQ(f.accept, (std::vector<uint8_t>{1, 0, 1, 1, 0}));
  EXPECT_EQ(f.canvas, (std::vector<int32_t>{200, f.renoise(1), 77, 203, f.renoise(4)}));

  f.mask[4] = 1;
  f.tokens[4] = 88;
  be->decide(f.a);
  EXPECT_EQ(f.accept, (std::vector<uint8_t>{1, 0, 1, 1, 1}));
  EXPECT_EQ(f.canvas, (std::vector<int32_t>{200, f.renoise(1), 77, 203, 88}));
  EXPECT_EQ(f.accept, entropy_bound_accept(f.entropy, 0.025f, f.mask));
  EXPECT_EQ(f.prev, f.argmax) << "prev_argmax takes the whole argmax, pinned positions included";
}

TEST(DecidePins, ConfidenceAndStabilitySeeOnlyFreePositions) {
  auto be = make_cpu_backend();
  // Free entropies 0.001 and 0.003 (mean 0.002 < 0.005); the pinned 2.0 would make the mean 0.668.
  PinnedDecide f({0.001f, 2.0f, 0.003f}, {0, 1, 0}, {0, 5, 0});
  f.a.greedy = true;
  f.a.entropy_bound = 1.0f;
  f.a.confidence_threshold = 0.005f;
  f.a.have_prev = true;
  f.prev[1] = 999;  // differs at the pinned position only
  be->decide(f.a);
  EXPECT_EQ(f.flags[0], 1) << "an argmax change at a pinned position is not a change";
  EXPECT_EQ(f.flags[1], 1);
  EXPECT_FALSE(is_confident(f.entropy, 0.005f));
  EXPECT_TRUE(is_confident(f.entropy, 0.005f, f.mask));
  EXPECT_EQ(f.canvas, (std::vector<int32_t>{100, 5, 102})) << "greedy: free positions take the argmax";
  f.prev = f.argmax;
  f.prev[2] = 999;  // differs at a free position
  be->decide(f.a);
  EXPECT_EQ(f.flags[0], 0);
}

TEST(DecidePins, AFullyPinnedCanvasIsConfidentAndRepeats) {
  auto be = make_cpu_backend();
  PinnedDecide f({0.7f, 0.9f}, {1, 1}, {3, 4});
  f.a.confidence_threshold = 0.005f;
  f.a.have_prev = false;
  be->decide(f.a);
  EXPECT_EQ(f.canvas, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(f.accept, (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(f.flags[0], 0) << "never the same on a canvas's first step";
  EXPECT_EQ(f.flags[1], 1) << "no free position: confident";
  f.a.have_prev = true;
  f.prev = {0, 0};
  be->decide(f.a);
  EXPECT_EQ(f.flags[0], 1);
}

// Random canvases: the pinned rule is the unpinned rule over the free positions' subsequence, an
// all-zero mask is the unpinned op bit for bit, and the CPU op agrees with the rules.
TEST(DecidePins, TheRuleIsTheUnpinnedRuleOverTheFreePositions) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  auto be = make_cpu_backend();
  for (int trial = 0; trial < 200; ++trial) {
    const int C = 1 + static_cast<int>(gen() % 64);
    std::vector<float> h(C);
    std::vector<uint8_t> mask(C);
    for (int p = 0; p < C; ++p) {
      const float x = u(gen);
      h[p] = trial % 3 == 0 ? static_cast<float>(gen() % 4) * 0.05f : x * x * x;  // ties every third trial
      mask[p] = u(gen) < 0.3f ? 1 : 0;
    }
    const float bound = u(gen) * 0.5f;
    std::vector<float> free_h;
    for (int p = 0; p < C; ++p)
      if (!mask[p]) free_h.push_back(h[p]);
    const std::vector<uint8_t> sub = entropy_bound_accept(free_h, bound);
    const std::vector<uint8_t> got = entropy_bound_accept(h, bound, mask);
    size_t k = 0;
    for (int p = 0; p < C; ++p) {
      if (mask[p]) {
        EXPECT_EQ(got[p], 1);
      } else {
        EXPECT_EQ(got[p], sub[k++]) << "trial " << trial << " position " << p;
      }
    }
    EXPECT_EQ(is_confident(h, 0.2f, mask), free_h.empty() || is_confident(free_h, 0.2f));
    const std::vector<uint8_t> zeros(C, 0);
    EXPECT_EQ(entropy_bound_accept(h, bound, zeros), entropy_bound_accept(h, bound));
    EXPECT_EQ(is_confident(h, 0.2f, zeros), is_confident(h, 0.2f));

    // The op: an all-zero mask writes exactly what no mask writes.
    PinnedDecide with(h, zeros, std::vector<int32_t>(C, 0)), without(h, zeros, std::vector<int32_t>(C, 0));
    without.a.pin_mask = Tensor{};
    without.a.pin_tokens = Tensor{};
    for (PinnedDecide* f : {&with, &without}) {
      f->a.entropy_bound = bound;
      f->a.confidence_threshold = 0.2f;
      f->a.have_prev = true;
      f->prev[0] ^= trial & 1;
      be->decide(f->a);
    }
    EXPECT_EQ(with.canvas, without.canvas);
    EXPECT_EQ(with.accept, without.accept);
    EXPECT_EQ(with.flags[0], without.flags[0]);
    EXPECT_EQ(with.flags[1], without.flags[1]);
    EXPECT_EQ(without.accept, entropy_bound_accept(h, bound));
  }
}

TEST(DecidePins, RejectsBadPinArguments) {
  auto be = make_cpu_backend();
  PinnedDecide f({0.1f, 0.2f}, {0, 1}, {0, 3});
  DecideArgs bad = f.a;
  bad.pin_mask = Tensor{};
  EXPECT_THROW(be->decide(bad), Error) << "pin_tokens without pin_mask";
  bad = f.a;
  bad.pin_tokens = Tensor{};
  EXPECT_THROW(be->decide(bad), Error) << "pin_mask without pin_tokens";
  bad = f.a;
  bad.pin_mask = borrow_tensor(f.mask.data(), ScalarType::kU8, {1});
  EXPECT_THROW(be->decide(bad), Error) << "mask of the wrong length";
  bad = f.a;
  bad.pin_tokens = borrow_tensor(f.entropy.data(), ScalarType::kF32, {2});
  EXPECT_THROW(be->decide(bad), Error) << "tokens of the wrong type";
  EXPECT_EQ(f.canvas, (std::vector<int32_t>{-1, -1}));
}

}  // namespace
}  // namespace dgemma
