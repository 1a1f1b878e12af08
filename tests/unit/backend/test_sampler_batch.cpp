// The batched tail ops on the CPU backend: sampler_batch and decide_batch give each canvas exactly
// what the single-canvas op gives it, and a canvas without sampling (greedy) gets the argmax as its
// sample and nothing else changed.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "util/bf16.h"
#include "util/counter_rng.h"

namespace dgemma {
namespace {

struct Outputs {
  Tensor logits, entropy, argmax, sample, logprob, argmax_gap, sample_gap, floor, top_ids, top_lp;
};

template <typename T>
std::vector<T> values(const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data, t.nbytes());
  return v;
}

SamplerArgs make(const Tensor& logits, Outputs& o, float T, uint64_t key, SampleFilter f, int top_n, bool want_sample) {
  const int64_t C = logits.dim(0), V = logits.dim(1);
  o.logits = host_tensor(ScalarType::kBF16, {C, V});
  std::memcpy(o.logits.data, logits.data, logits.nbytes());
  for (Tensor* t : {&o.entropy, &o.logprob, &o.argmax_gap, &o.sample_gap, &o.floor}) *t = host_tensor(ScalarType::kF32, {C});
  for (Tensor* t : {&o.argmax, &o.sample}) *t = host_tensor(ScalarType::kI32, {C});
  SamplerArgs a;
  a.logits = o.logits;
  a.temperature = T;
  a.sample_key = key;
  a.want_sample = want_sample;
  a.entropy = o.entropy, a.argmax = o.argmax, a.sample = o.sample, a.argmax_logprob = o.logprob;
  a.argmax_gap = o.argmax_gap, a.sample_gap = o.sample_gap, a.sample_floor = o.floor;
  a.filter = f;
  if (top_n > 0) {
    o.top_ids = host_tensor(ScalarType::kI32, {C, top_n});
    o.top_lp = host_tensor(ScalarType::kF32, {C, top_n});
    a.top_n = top_n, a.top_ids = o.top_ids, a.top_logprobs = o.top_lp;
  }
  return a;
}

void expect_same(const Outputs& a, const Outputs& b, bool sample_too) {
  EXPECT_EQ(values<uint16_t>(a.logits), values<uint16_t>(b.logits));
  EXPECT_EQ(values<float>(a.entropy), values<float>(b.entropy));
  EXPECT_EQ(values<int32_t>(a.argmax), values<int32_t>(b.argmax));
  EXPECT_EQ(values<float>(a.logprob), values<float>(b.logprob));
  EXPECT_EQ(values<float>(a.argmax_gap), values<float>(b.argmax_gap));
  EXPECT_EQ(values<float>(a.floor), values<float>(b.floor));
  if (!a.top_ids.empty()) {
    EXPECT_EQ(values<int32_t>(a.top_ids), values<int32_t>(b.top_ids));
    EXPECT_EQ(values<float>(a.top_lp), values<float>(b.top_lp));
  }
  if (sample_too) {
    EXPECT_EQ(values<int32_t>(a.sample), values<int32_t>(b.sample));
    EXPECT_EQ(values<float>(a.sample_gap), values<float>(b.sample_gap));
  }
}

Tensor random_logits(std::mt19937_64& rng, int64_t C, int64_t V) {
  Tensor t = host_tensor(ScalarType::kBF16, {C, V});
  std::normal_distribution<float> n(0.0f, 3.0f);
  for (int64_t i = 0; i < C * V; ++i) t.ptr<uint16_t>()[i] = f32_to_bf16(n(rng));
  return t;
}

TEST(SamplerBatch, EachCanvasIsItsSingleCall) {
  auto be = make_cpu_backend();
  std::mt19937_64 rng(7);
  const int64_t C = 5, V = 96;
  const std::vector<Tensor> logits = {random_logits(rng, C, V), random_logits(rng, C, V), random_logits(rng, C, V)};
  std::vector<Outputs> single(3), batched(3);
  std::vector<SamplerArgs> one, many;
  const SampleFilter filters[3] = {{}, {4, 1.0, 0.0}, {0, 0.8, 0.01}};
  for (size_t i = 0; i < 3; ++i) {
    const float T = 0.5f + 0.3f * static_cast<float>(i);
    const uint64_t key = rng::stream_key(11, i, 2, rng::kSample);
    one.push_back(make(logits[i], single[i], T, key, filters[i], static_cast<int>(i) * 2, i != 1));
    many.push_back(make(logits[i], batched[i], T, key, filters[i], static_cast<int>(i) * 2, i != 1));
  }
  for (const SamplerArgs& a : one) be->sampler(a);
  be->sampler_batch(many);
  for (size_t i = 0; i < 3; ++i) expect_same(single[i], batched[i], true);
}

TEST(SamplerBatch, WithoutSamplingTheSampleIsTheArgmax) {
  auto be = make_cpu_backend();
  std::mt19937_64 rng(9);
  const Tensor logits = random_logits(rng, 6, 200);
  Outputs sampled, greedy;
  const uint64_t key = rng::stream_key(3, 0, 1, rng::kSample);
  be->sampler(make(logits, sampled, 0.7f, key, {}, 3, true));
  be->sampler(make(logits, greedy, 0.7f, key, {}, 3, false));
  expect_same(sampled, greedy, false);
  EXPECT_EQ(values<int32_t>(greedy.sample), values<int32_t>(greedy.argmax));
  EXPECT_EQ(values<float>(greedy.sample_gap), values<float>(greedy.argmax_gap));
  EXPECT_NE(values<int32_t>(sampled.sample), values<int32_t>(sampled.argmax));  // T = 0.7 over 200 tokens: the noise moves some
}

TEST(DecideBatch, EachCanvasIsItsSingleCall) {
  auto be = make_cpu_backend();
  std::mt19937_64 rng(5);
  const int64_t C = 40;
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<std::vector<Tensor>> keep(2);
  std::vector<DecideArgs> one, many;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> h(C);
    std::vector<int32_t> am(C), sm(C), prev(C);
    for (int64_t p = 0; p < C; ++p) {
      h[p] = u(rng) * u(rng);
      am[p] = static_cast<int32_t>(rng() % 1000), sm[p] = static_cast<int32_t>(rng() % 1000);
      prev[p] = u(rng) < 0.1f ? am[p] + 1 : am[p];
    }
    std::vector<uint8_t> mask(C);
    std::vector<int32_t> pins(C);
    for (int64_t p = 0; p < C; ++p) mask[p] = i == 2 && p % 3 == 0, pins[p] = mask[p] ? 7 : 0;
    for (int k = 0; k < 2; ++k) {
      auto put = [&](ScalarType t, const void* src, size_t bytes) {
        Tensor x = host_tensor(t, {C});
        std::memcpy(x.data, src, bytes);
        keep[k].push_back(x);
        return x;
      };
      DecideArgs a;
      a.entropy = put(ScalarType::kF32, h.data(), C * 4);
      a.argmax = put(ScalarType::kI32, am.data(), C * 4);
      a.sample = put(ScalarType::kI32, sm.data(), C * 4);
      a.prev_argmax = put(ScalarType::kI32, prev.data(), C * 4);
      a.canvas = put(ScalarType::kI32, prev.data(), C * 4);
      a.accept = put(ScalarType::kU8, mask.data(), C);
      a.flags = host_tensor(ScalarType::kI32, {2});
      keep[k].push_back(a.flags);
      if (i == 2) a.pin_mask = put(ScalarType::kU8, mask.data(), C), a.pin_tokens = put(ScalarType::kI32, pins.data(), C * 4);
      a.greedy = i == 1;
      a.have_prev = i != 0;
      a.entropy_bound = 0.2f * static_cast<float>(i + 1);
      a.renoise_key = rng::stream_key(1, static_cast<uint64_t>(i), 4, rng::kRenoise);
      a.vocab = 1000;
      (k == 0 ? one : many).push_back(a);
    }
  }
  for (const DecideArgs& a : one) be->decide(a);
  be->decide_batch(many);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(values<int32_t>(one[i].canvas), values<int32_t>(many[i].canvas));
    EXPECT_EQ(values<int32_t>(one[i].flags), values<int32_t>(many[i].flags));
    EXPECT_EQ(values<int32_t>(one[i].prev_argmax), values<int32_t>(many[i].prev_argmax));
    EXPECT_EQ(values<uint8_t>(one[i].accept), values<uint8_t>(many[i].accept));
  }
}

}  // namespace
}  // namespace dgemma
