// The pieces tensor parallelism is built from, on the CPU backend: the in-process collective (layout,
// exact sums with -0, abort without a hang) and each sharded op against the one-rank op, bit for bit —
// the vocabulary-sharded sampler (ties placed across shard boundaries; its sample filters and top-N
// lists too), the expert-parallel MoE, the blocked self-conditioning GEMM and the sharded embedding
// lookup — for 2, 4 and 8 ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/thread_collective.h"
#include "util/bf16.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {
namespace {

void run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back(fn, r);
  for (auto& x : t) x.join();
}

Tensor random_bf16(std::initializer_list<int64_t> dims, float std, uint64_t seed) {
  Tensor t = host_tensor(ScalarType::kBF16, dims);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, std);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<uint16_t>()[i] = f32_to_bf16(d(rng));
  return t;
}

// Columns [c0, c0 + n) of a [rows, cols] tensor, as a new tensor.
Tensor cols(const Tensor& t, int64_t c0, int64_t n) {
  const int64_t C = t.dim(-1), R = t.numel() / C;
  Tensor o = host_tensor(t.type, {R, n});
  const size_t es = scalar_size(t.type);
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(static_cast<uint8_t*>(o.data) + r * n * es, static_cast<uint8_t*>(t.data) + (r * C + c0) * es, n * es);
  return o;
}

bool same_bits(const Tensor& a, const Tensor& b) { return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0; }

TEST(ThreadCollective, GathersAlongTheLastDimensionAndSumsExactly) {
  const int n = 4;
  ThreadCollectiveGroup g(n);
  std::vector<Tensor> out(n), sum(n);
  run_ranks(n, [&](int r) {
    Tensor in = host_tensor(ScalarType::kI32, {3, 2});
    for (int i = 0; i < 6; ++i) in.ptr<int32_t>()[i] = 100 * r + i;
    out[r] = host_tensor(ScalarType::kI32, {3, 2 * n});
    g.rank(r).all_gather_last(in, out[r]);
    // Element i has its value on rank i % n and -0 elsewhere; element 3 is +0 on its owner.
    sum[r] = host_tensor(ScalarType::kBF16, {8});
    for (int i = 0; i < 8; ++i)
      sum[r].ptr<uint16_t>()[i] = i % n == r ? (i == 3 ? uint16_t{0} : f32_to_bf16(0.1f * (i + 1))) : kBf16NegZero;
    g.rank(r).all_reduce_sum(sum[r]);
  });
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < n; ++k)
        for (int j = 0; j < 2; ++j) EXPECT_EQ(out[r].ptr<int32_t>()[i * 2 * n + k * 2 + j], 100 * k + i * 2 + j);
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(sum[r].ptr<uint16_t>()[i], i == 3 ? uint16_t{0} : f32_to_bf16(0.1f * (i + 1))) << "element " << i;
  }
}

TEST(ThreadCollective, AbortWakesEveryRankInsteadOfHanging) {
  ThreadCollectiveGroup g(2);
  std::vector<int> threw(2, 0);
  run_ranks(2, [&](int r) {
    if (r == 1) {
      g.abort();  // rank 1 failed before its collective: rank 0 must not wait for it
      return;
    }
    try {
      Tensor t = host_tensor(ScalarType::kF32, {4});
      g.rank(0).all_reduce_sum(t);
    } catch (const Error&) {
      threw[0] = 1;
    }
  });
  EXPECT_EQ(threw[0], 1);
  g.reset();
  std::vector<Tensor> t(2);
  run_ranks(2, [&](int r) {
    t[r] = host_tensor(ScalarType::kF32, {1});
    t[r].ptr<float>()[0] = static_cast<float>(r + 1);
    g.rank(r).all_reduce_sum(t[r]);
  });
  EXPECT_EQ(t[0].ptr<float>()[0], 3.0f);
  EXPECT_EQ(t[1].ptr<float>()[0], 3.0f);
}

class ShardedOps : public ::testing::TestWithParam<int> {};

TEST_P(ShardedOps, VocabularyShardedSamplerEqualsOneRank) {
  const int n = GetParam();
  auto be = make_cpu_backend();
  const int64_t C = 12, V = 1024, Vr = V / n;
  Tensor logits = random_bf16({C, V}, 4.0f, 5);
  uint16_t* l = logits.ptr<uint16_t>();
  // Ties: equal maxima on both sides of every shard boundary (the lower id must win), and a row whose
  // runner-up equals its maximum.
  for (int64_t b = 1; b < n; ++b) l[1 * V + b * Vr - 1] = l[1 * V + b * Vr] = f32_to_bf16(40.0f);
  l[2 * V + 3] = l[2 * V + V - 1] = f32_to_bf16(35.0f);
  // The last case draws no noise (a greedy canvas: sample = argmax).
  for (const auto& [temperature, want_sample] : {std::pair{1.0f, true}, std::pair{0.55f, true}, std::pair{0.55f, false}}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature) + (want_sample ? "" : ", no sampling"));
    // entropy, argmax, sample, argmax log-probability, argmax margin, sample margin
    auto outputs = [&](Backend& b) {
      return std::vector<Tensor>{b.alloc(ScalarType::kF32, {C}), b.alloc(ScalarType::kI32, {C}), b.alloc(ScalarType::kI32, {C}),
                                 b.alloc(ScalarType::kF32, {C}), b.alloc(ScalarType::kF32, {C}), b.alloc(ScalarType::kF32, {C})};
    };
    auto args = [&](const Tensor& lg, std::vector<Tensor>& o) {
      SamplerArgs a;
      a.logits = lg;
      a.temperature = temperature;
      a.sample_key = rng::stream_key(3, 1, 2, rng::kSample);
      a.want_sample = want_sample;
      a.entropy = o[0], a.argmax = o[1], a.sample = o[2], a.argmax_logprob = o[3], a.argmax_gap = o[4], a.sample_gap = o[5];
      return a;
    };
    Tensor want_probs = host_tensor(ScalarType::kBF16, {C, V});
    std::memcpy(want_probs.data, logits.data, logits.nbytes());
    std::vector<Tensor> want = outputs(*be);
    be->sampler(args(want_probs, want));
    if (!want_sample) {
      EXPECT_TRUE(same_bits(want[2], want[1])) << "sample = argmax without sampling";
    }
    EXPECT_EQ(want[1].ptr<int32_t>()[1], static_cast<int32_t>(Vr - 1)) << "first of the tied maxima";
    EXPECT_EQ(want[4].ptr<float>()[2], 0.0f) << "tied runner-up";

    ThreadCollectiveGroup g(n);
    std::vector<std::vector<Tensor>> got(n);
    std::vector<Tensor> probs(n);
    run_ranks(n, [&](int r) {
      auto rb = make_cpu_backend();
      probs[r] = cols(logits, r * Vr, Vr);
      got[r] = outputs(*rb);
      SamplerArgs a = args(probs[r], got[r]);
      a.vocab_first = r * Vr;
      a.vocab_total = V;
      a.collective = &g.rank(r);
      rb->sampler(a);
    });
    for (int r = 0; r < n; ++r) {
      for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(same_bits(got[r][k], want[k])) << "rank " << r << " output " << k;
      EXPECT_TRUE(same_bits(probs[r], cols(want_probs, r * Vr, Vr))) << "rank " << r << " probabilities";
    }
  }
}

// The sample filters (one floor from the ranks' histograms added) and the top-N lists (the ranks'
// lists merged by z, then id) against the one-rank sampler, bit for bit; ties straddle the shard
// boundaries so that both the floor and the id order are exercised.
TEST_P(ShardedOps, ShardedSampleFiltersAndTopLogprobsEqualOneRank) {
  const int n = GetParam();
  auto be = make_cpu_backend();
  const int64_t C = 6, V = 1024, Vr = V / n;
  const int top_n = 5;
  Tensor logits = random_bf16({C, V}, 3.0f, 11);
  uint16_t* l = logits.ptr<uint16_t>();
  for (int64_t b = 1; b < n; ++b) l[1 * V + b * Vr - 1] = l[1 * V + b * Vr] = f32_to_bf16(30.0f);
  for (int64_t v = 0; v < V; v += Vr / 2) l[2 * V + v] = f32_to_bf16(12.0f);  // a wide tie at the top
  struct Case {
    SampleFilter f;
    const char* name;
  };
  const Case cases[] = {{{4, 1.0, 0.0}, "top_k 4"},
                        {{0, 0.7, 0.0}, "top_p 0.7"},
                        {{0, 1.0, 0.02}, "min_p 0.02"},
                        {{40, 0.9, 0.001}, "all three"}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // entropy, argmax, sample, argmax log-probability, sample floor, top ids, top log-probabilities
    auto outputs = [&](Backend& b) {
      return std::vector<Tensor>{b.alloc(ScalarType::kF32, {C}),        b.alloc(ScalarType::kI32, {C}),
                                 b.alloc(ScalarType::kI32, {C}),        b.alloc(ScalarType::kF32, {C}),
                                 b.alloc(ScalarType::kF32, {C}),        b.alloc(ScalarType::kI32, {C, top_n}),
                                 b.alloc(ScalarType::kF32, {C, top_n})};
    };
    auto args = [&](const Tensor& lg, std::vector<Tensor>& o) {
      SamplerArgs a;
      a.logits = lg;
      a.temperature = 0.8f;
      a.sample_key = rng::stream_key(4, 2, 1, rng::kSample);
      a.entropy = o[0], a.argmax = o[1], a.sample = o[2], a.argmax_logprob = o[3], a.sample_floor = o[4];
      a.filter = c.f;
      a.top_n = top_n, a.top_ids = o[5], a.top_logprobs = o[6];
      return a;
    };
    Tensor want_probs = host_tensor(ScalarType::kBF16, {C, V});
    std::memcpy(want_probs.data, logits.data, logits.nbytes());
    std::vector<Tensor> want = outputs(*be);
    be->sampler(args(want_probs, want));
    EXPECT_EQ(want[5].ptr<int32_t>()[1 * top_n], static_cast<int32_t>(Vr - 1)) << "first of the tied maxima";
    for (int64_t p = 0; p < C; ++p) EXPECT_GT(want[4].ptr<float>()[p], -INFINITY) << "row " << p << " is restricted";

    ThreadCollectiveGroup g(n);
    std::vector<std::vector<Tensor>> got(n);
    std::vector<Tensor> probs(n);
    run_ranks(n, [&](int r) {
      auto rb = make_cpu_backend();
      probs[r] = cols(logits, r * Vr, Vr);
      got[r] = outputs(*rb);
      SamplerArgs a = args(probs[r], got[r]);
      a.vocab_first = r * Vr;
      a.vocab_total = V;
      a.collective = &g.rank(r);
      rb->sampler(a);
    });
    for (int r = 0; r < n; ++r) {
      for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(same_bits(got[r][k], want[k])) << "rank " << r << " output " << k;
      EXPECT_TRUE(same_bits(probs[r], cols(want_probs, r * Vr, Vr))) << "rank " << r << " probabilities";
    }
  }
}

TEST_P(ShardedOps, ExpertParallelMoeEqualsOneRank) {
  const int n = GetParam();
  auto be = make_cpu_backend();
  const int64_t T = 9, H = 32, E = 8, I = 16;
  MoeArgs m;
  m.router_in = random_bf16({T, H}, 1.0f, 11);
  m.expert_in = random_bf16({T, H}, 1.0f, 12);
  m.router_scale = random_bf16({H}, 0.3f, 13);
  m.router_proj = random_bf16({E, H}, 0.5f, 14);
  m.per_expert_scale = random_bf16({E}, 0.3f, 15);
  const Tensor gate_up = random_bf16({E, 2 * I, H}, 0.2f, 16), down = random_bf16({E, H, I}, 0.2f, 17);
  m.gate_up = gate_up;
  m.down = down;
  m.top_k = 3;
  m.out = host_tensor(ScalarType::kBF16, {T, H});
  be->moe(m);
  ThreadCollectiveGroup g(n);
  std::vector<Tensor> out(n);
  run_ranks(n, [&](int r) {
    MoeArgs a = m;
    const int64_t e0 = E * r / n, e1 = E * (r + 1) / n;
    a.gate_up = gate_up.rows(e0, e1);
    a.down = down.rows(e0, e1);
    a.expert_first = e0;
    a.collective = &g.rank(r);
    a.out = out[r] = host_tensor(ScalarType::kBF16, {T, H});
    make_cpu_backend()->moe(a);
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(same_bits(out[r], m.out)) << "rank " << r;
}

TEST_P(ShardedOps, BlockedSelfConditioningGemmAndShardedEmbeddingEqualOneRank) {
  const int n = GetParam();
  auto be = make_cpu_backend();
  const int64_t T = 5, V = 512, H = 24, Vr = V / n;
  const Tensor probs = random_bf16({T, V}, 0.01f, 21), table = random_bf16({V, H}, 1.0f, 22);
  Tensor want = host_tensor(ScalarType::kBF16, {T, H});
  be->matmul_kn(probs, table, want);
  Tensor ids = host_tensor(ScalarType::kI32, {T});
  for (int64_t t = 0; t < T; ++t) ids.ptr<int32_t>()[t] = static_cast<int32_t>((t * 131 + 7) % V);
  Tensor want_e = host_tensor(ScalarType::kBF16, {T, H});
  be->embed(ids, table, 7.5f, want_e);
  ThreadCollectiveGroup g(n);
  std::vector<Tensor> got(n), got_e(n);
  run_ranks(n, [&](int r) {
    auto rb = make_cpu_backend();
    const int blocks = kVocabBlocks / n;
    Tensor part = host_tensor(ScalarType::kF32, {blocks, T, H}),
           all = host_tensor(ScalarType::kF32, {kVocabBlocks, T, H});
    rb->matmul_kn_blocks(cols(probs, r * Vr, Vr), table.rows(r * Vr, (r + 1) * Vr), blocks, part);
    g.rank(r).all_gather_last(part.reshape({1, blocks * T * H}), all.reshape({1, kVocabBlocks * T * H}));
    got[r] = host_tensor(ScalarType::kBF16, {T, H});
    rb->sum_blocks(all, got[r]);
    got_e[r] = host_tensor(ScalarType::kBF16, {T, H});
    rb->embed_shard(ids, table.rows(r * Vr, (r + 1) * Vr), r * Vr, V, 7.5f, got_e[r]);
    g.rank(r).all_reduce_sum(got_e[r]);
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(same_bits(got[r], want)) << "rank " << r << " probs . E";
    EXPECT_TRUE(same_bits(got_e[r], want_e)) << "rank " << r << " embedding";
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShardedOps, ::testing::Values(2, 4, 8));

}  // namespace
}  // namespace dgemma
