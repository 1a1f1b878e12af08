// The CPU sampler's support filters (min_p, top_k, top_p) and top-N log-probabilities against a
// brute-force fp64 reference written from the definitions (backend/sample_filter.h): small random
// rows, rows full of ties, saturated logits, and the guarantee that everything but the sample is the
// unfiltered op's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "util/bf16.h"
#include "util/counter_rng.h"

namespace dgemma {
namespace {

constexpr float kCap = 30.0f;

float z_ref(uint16_t bits, float T) { return std::tanh(bf16_to_f32(bits) / kCap) * kCap / T; }

struct RowRef {
  std::vector<bool> allowed;
  float floor = 0;  // the least z allowed
  int32_t sample = 0;
};

// The definitions, in fp64, by sorting: min_p on p / max p, top_k on the k-th largest z, top_p on
// the mass strictly above each token after renormalisation.
RowRef brute_force(const std::vector<uint16_t>& row, float T, const SampleFilter& f, uint64_t key, uint32_t pos) {
  const size_t V = row.size();
  std::vector<double> z(V);
  double m = -INFINITY;
  for (size_t v = 0; v < V; ++v) {
    z[v] = z_ref(row[v], T);
    m = std::max(m, z[v]);
  }
  std::vector<double> p(V);
  for (size_t v = 0; v < V; ++v) p[v] = std::exp(z[v] - m);  // proportional to softmax; max p = 1
  RowRef r;
  r.allowed.assign(V, true);
  if (f.min_p > 0)
    for (size_t v = 0; v < V; ++v) r.allowed[v] = p[v] >= f.min_p;
  if (f.top_k > 0) {
    std::vector<double> kept;
    for (size_t v = 0; v < V; ++v)
      if (r.allowed[v]) kept.push_back(z[v]);
    std::sort(kept.rbegin(), kept.rend());
    if (kept.size() > static_cast<size_t>(f.top_k)) {
      const double kth = kept[static_cast<size_t>(f.top_k) - 1];
      for (size_t v = 0; v < V; ++v) r.allowed[v] = r.allowed[v] && z[v] >= kth;
    }
  }
  if (f.top_p < 1) {
    double total = 0;
    for (size_t v = 0; v < V; ++v)
      if (r.allowed[v]) total += p[v];
    std::vector<bool> keep(V, false);
    for (size_t v = 0; v < V; ++v) {
      if (!r.allowed[v]) continue;
      double above = 0;
      for (size_t u = 0; u < V; ++u)
        if (r.allowed[u] && z[u] > z[v]) above += p[u];
      keep[v] = above < f.top_p * total;
    }
    r.allowed = keep;
  }
  r.floor = INFINITY;
  double best = -INFINITY;
  for (size_t v = 0; v < V; ++v) {
    if (!r.allowed[v]) continue;
    r.floor = std::min(r.floor, static_cast<float>(z[v]));
    const double g = z[v] + rng::gumbel(key, pos, static_cast<uint32_t>(v));
    if (g > best) {
      best = g;
      r.sample = static_cast<int32_t>(v);
    }
  }
  return r;
}

// The distance of the filter's parameters from a decision boundary of the row (relative), so the
// random cases avoid parameters that fp64 and the fixed-point sums could round differently.
double boundary_distance(const std::vector<uint16_t>& row, float T, const SampleFilter& f) {
  const size_t V = row.size();
  std::vector<double> z(V);
  double m = -INFINITY;
  for (size_t v = 0; v < V; ++v) m = std::max(m, z[v] = z_ref(row[v], T));
  double d = INFINITY;
  std::vector<double> p(V);
  for (size_t v = 0; v < V; ++v) p[v] = std::exp(z[v] - m);
  if (f.min_p > 0)
    for (size_t v = 0; v < V; ++v) d = std::min(d, std::abs(p[v] - f.min_p) / f.min_p);
  if (f.top_p < 1) {
    // Cumulative masses at every distinct z level (over the whole row: a conservative check).
    std::vector<size_t> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return z[a] > z[b]; });
    double total = 0;
    for (double x : p) total += x;
    double c = 0;
    for (size_t i = 0; i < V; ++i) {
      c += p[idx[i]];
      d = std::min(d, std::abs(c / total - f.top_p));
    }
  }
  return d;
}

struct Outputs {
  std::vector<float> entropy, logprob, floor, gap_a, gap_s, top_lp;
  std::vector<int32_t> argmax, sample, top_ids;
  std::vector<uint16_t> probs;
};

Outputs run(Backend& be, const std::vector<uint16_t>& logits, int64_t C, int64_t V, float T, uint64_t key,
            const SampleFilter& f, int top_n = 0) {
  Outputs o;
  o.probs = logits;
  o.entropy.assign(C, 0);
  o.logprob.assign(C, 0);
  o.floor.assign(C, 0);
  o.gap_a.assign(C, 0);
  o.gap_s.assign(C, 0);
  o.argmax.assign(C, -1);
  o.sample.assign(C, -1);
  o.top_ids.assign(static_cast<size_t>(C * std::max(top_n, 1)), -1);
  o.top_lp.assign(static_cast<size_t>(C * std::max(top_n, 1)), 0);
  SamplerArgs a;
  a.logits = borrow_tensor(o.probs.data(), ScalarType::kBF16, {C, V});
  a.softcap = kCap;
  a.temperature = T;
  a.sample_key = key;
  a.entropy = borrow_tensor(o.entropy.data(), ScalarType::kF32, {C});
  a.argmax = borrow_tensor(o.argmax.data(), ScalarType::kI32, {C});
  a.sample = borrow_tensor(o.sample.data(), ScalarType::kI32, {C});
  a.argmax_logprob = borrow_tensor(o.logprob.data(), ScalarType::kF32, {C});
  a.argmax_gap = borrow_tensor(o.gap_a.data(), ScalarType::kF32, {C});
  a.sample_gap = borrow_tensor(o.gap_s.data(), ScalarType::kF32, {C});
  a.sample_floor = borrow_tensor(o.floor.data(), ScalarType::kF32, {C});
  a.filter = f;
  a.top_n = top_n;
  if (top_n > 0) {
    a.top_ids = borrow_tensor(o.top_ids.data(), ScalarType::kI32, {C, top_n});
    a.top_logprobs = borrow_tensor(o.top_lp.data(), ScalarType::kF32, {C, top_n});
  }
  be.sampler(a);
  return o;
}

// Rows of V values: gaussian logits, or (ties) a handful of distinct values repeated.
std::vector<uint16_t> random_rows(std::mt19937_64& g, int64_t C, int64_t V, bool ties) {
  std::normal_distribution<float> n(0.0f, std::uniform_real_distribution<float>(0.5f, 6.0f)(g));
  std::vector<float> levels(4);
  for (auto& l : levels) l = n(g);
  std::vector<uint16_t> out(static_cast<size_t>(C * V));
  for (auto& x : out) x = f32_to_bf16(ties ? levels[g() % levels.size()] : n(g));
  return out;
}

SampleFilter random_filter(std::mt19937_64& g, int64_t V) {
  SampleFilter f;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const unsigned which = static_cast<unsigned>(g() % 7) + 1;  // a non-empty subset of the three
  if (which & 1) f.min_p = std::pow(10.0, -3.0 * u(g));
  if (which & 2) f.top_k = static_cast<int32_t>(1 + g() % static_cast<uint64_t>(V + 2));
  if (which & 4) f.top_p = 0.02 + 0.97 * u(g);
  return f;
}

void expect_unfiltered_parts_equal(const Outputs& a, const Outputs& b) {
  EXPECT_EQ(a.entropy, b.entropy);
  EXPECT_EQ(a.argmax, b.argmax);
  EXPECT_EQ(a.logprob, b.logprob);
  EXPECT_EQ(a.gap_a, b.gap_a);
  EXPECT_EQ(a.probs, b.probs) << "self-conditioning probabilities ignore the filter";
}

TEST(SamplerFilter, MatchesTheBruteForceDefinitionOnRandomRows) {
  auto be = make_cpu_backend();
  std::mt19937_64 g(20251201);
  int checked_rows = 0, restricted_rows = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const int64_t V = std::vector<int64_t>{1, 2, 7, 64, 300, 1500}[trial % 6];
    const int64_t C = 4;
    const bool ties = trial % 3 == 0;
    const std::vector<uint16_t> logits = random_rows(g, C, V, ties);
    const float T = std::uniform_real_distribution<float>(0.3f, 1.5f)(g);
    const uint64_t key = rng::stream_key(static_cast<uint64_t>(trial), 0, 3, rng::kSample);
    SampleFilter f = random_filter(g, V);
    bool near = false;
    for (int64_t p = 0; p < C; ++p) {
      const std::vector<uint16_t> row(logits.begin() + p * V, logits.begin() + (p + 1) * V);
      near = near || boundary_distance(row, T, f) < 1e-7;
    }
    if (near) f = SampleFilter{f.top_k, 1.0, 0.0};  // keep top_k (exact in counts) only
    const Outputs plain = run(*be, logits, C, V, T, key, SampleFilter{});
    const Outputs o = run(*be, logits, C, V, T, key, f);
    expect_unfiltered_parts_equal(plain, o);
    for (int64_t p = 0; p < C; ++p) {
      const std::vector<uint16_t> row(logits.begin() + p * V, logits.begin() + (p + 1) * V);
      const RowRef r = brute_force(row, T, f, key, static_cast<uint32_t>(p));
      ASSERT_EQ(o.floor[p], r.floor) << "trial " << trial << " row " << p;
      ASSERT_EQ(o.sample[p], r.sample) << "trial " << trial << " row " << p;
      ASSERT_TRUE(r.allowed[static_cast<size_t>(o.argmax[p])]) << "the argmax is always allowed";
      ++checked_rows;
      if (std::count(r.allowed.begin(), r.allowed.end(), true) < V) ++restricted_rows;
    }
  }
  EXPECT_EQ(checked_rows, 480);
  EXPECT_GT(restricted_rows, 200) << "the cases must exercise real restrictions";
}

std::vector<uint16_t> bf16_row(const std::vector<float>& v) {
  std::vector<uint16_t> r;
  for (float x : v) r.push_back(f32_to_bf16(x));
  return r;
}

float floor_of(Backend& be, const std::vector<float>& row, const SampleFilter& f, float T = 1.0f) {
  const auto logits = bf16_row(row);
  return run(be, logits, 1, static_cast<int64_t>(row.size()), T, 7, f).floor[0];
}

TEST(SamplerFilter, TiesAtTheBoundaryAreKeptTogether) {
  auto be = make_cpu_backend();
  const std::vector<float> row = {1, 2, 0, 2, 1, 2, -1};
  const float z2 = z_ref(f32_to_bf16(2), 1), z1 = z_ref(f32_to_bf16(1), 1), z0 = z_ref(f32_to_bf16(0), 1);
  EXPECT_EQ(floor_of(*be, row, {1, 1.0, 0.0}), z2) << "top_k 1 keeps all three tied maxima";
  EXPECT_EQ(floor_of(*be, row, {3, 1.0, 0.0}), z2);
  EXPECT_EQ(floor_of(*be, row, {4, 1.0, 0.0}), z1) << "the 4th largest is a 1: both 1s are kept";
  EXPECT_EQ(floor_of(*be, row, {6, 1.0, 0.0}), z0);
  EXPECT_EQ(floor_of(*be, row, {100, 1.0, 0.0}), z_ref(f32_to_bf16(-1), 1)) << "k above V: everything";
  // p(2) = e^2 / S each; three of them hold 3e^2 / S = 0.77 of the mass.
  EXPECT_EQ(floor_of(*be, row, {0, 0.5, 0.0}), z2) << "the tie group reaching 0.5 is kept whole";
  EXPECT_EQ(floor_of(*be, row, {0, 0.85, 0.0}), z1);
  // min_p: p(1) / p(2) = e^-1 = 0.368.
  EXPECT_EQ(floor_of(*be, row, {0, 1.0, 0.36}), z1);
  EXPECT_EQ(floor_of(*be, row, {0, 1.0, 0.37}), z2);
  EXPECT_EQ(floor_of(*be, row, {0, 1.0, 1.0}), z2) << "min_p 1 keeps exactly the maxima";
  // Stages in order: min_p 0.1 drops -1 (e^-3 = 0.05) and keeps 0 (e^-2 = 0.135); top_k 5 then cuts
  // between the 1s and the 0; top_p 0.99 over {2,2,2,1,1} keeps them all.
  EXPECT_EQ(floor_of(*be, row, {5, 0.99, 0.1}), z1);
  EXPECT_EQ(floor_of(*be, row, {6, 1.0, 0.1}), z0);
}

TEST(SamplerFilter, SaturatedLogitsAndSignedZerosAreTiesInZ) {
  auto be = make_cpu_backend();
  // 30 tanh(x / 30) is 30 in fp32 for both 2000 and 3000 (distinct bf16 values, equal z).
  ASSERT_EQ(z_ref(f32_to_bf16(2000), 1), z_ref(f32_to_bf16(3000), 1));
  EXPECT_EQ(floor_of(*be, {3000, 5, 2000, 1}, {1, 1.0, 0.0}), 30.0f);
  const auto logits = bf16_row({3000, 5, 2000, 1});
  for (uint64_t key = 0; key < 40; ++key) {
    const Outputs o = run(*be, logits, 1, 4, 1.0f, key, {1, 1.0, 0.0});
    EXPECT_TRUE(o.sample[0] == 0 || o.sample[0] == 2) << "only the two saturated tokens are allowed";
  }
  // -0 and +0 are one value of z.
  EXPECT_EQ(floor_of(*be, {-0.0f, -3, 0.0f, -4}, {1, 1.0, 0.0}), 0.0f);
  const auto zeros = bf16_row({-0.0f, -3, 0.0f, -4});
  int seen_first = 0, seen_third = 0;
  for (uint64_t key = 0; key < 60; ++key) {
    const Outputs o = run(*be, zeros, 1, 4, 1.0f, key, {1, 1.0, 0.0});
    ASSERT_TRUE(o.sample[0] == 0 || o.sample[0] == 2);
    (o.sample[0] == 0 ? seen_first : seen_third) += 1;
  }
  EXPECT_GT(seen_first, 0);
  EXPECT_GT(seen_third, 0);
}

TEST(SamplerFilter, OffMeansNoThresholdAndTheUnfilteredSample) {
  auto be = make_cpu_backend();
  std::mt19937_64 g(5);
  const auto logits = random_rows(g, 3, 500, false);
  const Outputs o = run(*be, logits, 3, 500, 0.7f, 11, SampleFilter{});
  for (float f : o.floor) EXPECT_EQ(f, -INFINITY);
  // top_k 0 / -1, top_p 1 and min_p 0 are all "off".
  EXPECT_FALSE((SampleFilter{-1, 1.0, 0.0}).active());
  EXPECT_TRUE((SampleFilter{0, 0.999, 0.0}).active());
  const Outputs all = run(*be, logits, 3, 500, 0.7f, 11, SampleFilter{500, 1.0, 0.0});
  EXPECT_EQ(all.sample, o.sample) << "top_k = V restricts nothing";
  EXPECT_EQ(all.gap_s, o.gap_s);
}

TEST(SamplerTopLogprobs, MatchBruteForceOrderAndValues) {
  auto be = make_cpu_backend();
  std::mt19937_64 g(99);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t V = std::vector<int64_t>{20, 97, 1000}[trial % 3], C = 3;
    const int n = std::vector<int>{1, 5, 20}[trial % 3 == 0 ? 2 : trial % 2];
    const auto logits = random_rows(g, C, V, trial % 2 == 0);
    const float T = 0.8f;
    const Outputs o = run(*be, logits, C, V, T, 1, SampleFilter{}, n);
    const Outputs f = run(*be, logits, C, V, T, 1, SampleFilter{2, 1.0, 0.0}, n);
    EXPECT_EQ(o.top_ids, f.top_ids) << "the filter does not change the alternatives";
    EXPECT_EQ(o.top_lp, f.top_lp);
    for (int64_t p = 0; p < C; ++p) {
      std::vector<double> z(V);
      double m = -INFINITY, s = 0;
      for (int64_t v = 0; v < V; ++v) m = std::max(m, z[v] = z_ref(logits[p * V + v], T));
      for (double x : z) s += std::exp(x - m);
      std::vector<int32_t> idx(V);
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
      for (int j = 0; j < n; ++j) {
        EXPECT_EQ(o.top_ids[p * n + j], idx[j]) << "z descending, lower id first on ties";
        EXPECT_NEAR(o.top_lp[p * n + j], z[idx[j]] - m - std::log(s), 1e-5);
      }
      EXPECT_EQ(o.top_ids[p * n], o.argmax[p]);
      EXPECT_EQ(o.top_lp[p * n], o.logprob[p]) << "the first alternative is the committed token";
    }
  }
}

}  // namespace
}  // namespace dgemma
