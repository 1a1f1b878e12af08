// The sampler's kernels (src/backend/cuda/sampler/sampler_kernel.cuh and sampler/stats_kernel.cuh: slice
// maxima, the z table, the main pass, top-N, the merge of the slices, the probabilities) run on the
// host through cuda_emulator.h, in the launcher's order and workspace layout, against the CPU
// backend's sampler: several canvases a launch (each its own rows, temperature, greedy or sampling,
// with or without probabilities, gaps and top-N), rows cut into several slices, slices swept 8 logits
// a round (16-byte aligned, a multiple of 8 long) or one (otherwise), peaked and flat rows (flat: every logit
// within the noise's reach of the best, the screen and the bound at work over several rounds), saturated
// logits (different logits of one z: ties broken by the lowest index), and temperatures whose e^z table
// cannot serve some or all rows (the per-element exps then). The host's z is the CPU's bit for bit (the same
// tanhf), so the argmax and the sample must be the CPU's exactly; the entropy within the bound the kernels
// derive for their fp32 sums, the log-probabilities and the probabilities (their denominator) within what
// tests/gpu allows the device. The device's own maths (tanhf, expf, the fast logarithms' rounding) is checked
// by tests/gpu; the emulator's __log2f errs by its documented maximum. Guided gaps (backend.h GuidedGap):
// canvases whose rows [first, last) see only a random token mask (dense, sparse, with ids past the
// constraint's vocabulary), mixed with unguided canvases in one launch, against the CPU's masked
// sampler to the same bounds. Then the main pass's pieces
// alone: its hash against rng::bits, the noise estimate against its claimed bound, the warp maximum,
// which rows the e^z table serves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/tensor.h"
#include "util/bf16.h"
#include "util/counter_rng.h"

// The emulator first: it provides the device operations that the kernel headers use.
// clang-format off
#include "cuda_emulator.h"
#include "backend/cuda/sampler/sampler_kernel.cuh"
#include "backend/cuda/sampler/stats_kernel.cuh"
// clang-format on

namespace dgemma::cuda {
namespace {

// How many candidates a warp of the main pass keeps for the end of the slice: kCandidates (the
// launcher's), or one (nearly every candidate takes the overflow's exact path).
struct Pass {
  bool one_candidate = false;
  std::string name() const { return one_candidate ? "one candidate a warp" : "main pass"; }
};
constexpr Pass kMain{false}, kOneCandidate{true};

// One canvas of a case and what each backend wrote for it.
struct Canvas {
  int64_t C = 0;
  float T = 1.0f, cap = 30.0f;
  bool want_sample = true, want_probs = true, gaps = false;
  int top_n = 0;
  uint64_t key = 0;
  std::vector<uint16_t> logits;  // [C, V]
  // A guided gap: rows [gap_first, gap_last) see the tokens of `mask` below `limit` (empty: no gap).
  std::vector<uint32_t> mask;
  int32_t gap_first = 0, gap_last = 0, limit = 0;
  bool allowed(int64_t p, int64_t id) const {
    return mask.empty() || p < gap_first || p >= gap_last ||
           (id < limit && ((mask[static_cast<size_t>(id >> 5)] >> (id & 31)) & 1u) != 0);
  }
};
struct Outputs {
  std::vector<uint16_t> logits;
  std::vector<float> entropy, logprob, argmax_gap, sample_gap, top_lp;
  std::vector<int32_t> argmax, sample, top_ids;
  void size(const Canvas& c) {
    logits = c.logits;
    const size_t C = static_cast<size_t>(c.C);
    entropy.assign(C, -1.0f), logprob.assign(C, -1.0f), argmax_gap.assign(C, -1.0f), sample_gap.assign(C, -1.0f);
    argmax.assign(C, -1), sample.assign(C, -1);
    top_ids.assign(C * static_cast<size_t>(c.top_n), -1), top_lp.assign(top_ids.size(), 0.0f);
  }
};

Outputs run_cpu(const Canvas& c, int64_t V) {
  Outputs o;
  o.size(c);
  auto be = make_cpu_backend();
  SamplerArgs a;
  GuidedTables tables;  // the sampler reads the gap mask and the constraint's vocabulary size only
  std::vector<uint32_t> mask = c.mask;
  if (!mask.empty()) {
    tables.vocab_size = c.limit;
    tables.gap_mask = borrow_tensor(mask.data(), ScalarType::kI32, {static_cast<int64_t>(mask.size())});
    a.guided = GuidedGap{&tables, c.gap_first, c.gap_last, 0, c.gap_last - c.gap_first};
  }
  a.logits = borrow_tensor(o.logits.data(), ScalarType::kBF16, {c.C, V});
  a.softcap = c.cap;
  a.temperature = c.T;
  a.sample_key = c.key;
  a.want_probs = c.want_probs;
  a.want_sample = c.want_sample;
  a.entropy = borrow_tensor(o.entropy.data(), ScalarType::kF32, {c.C});
  a.argmax = borrow_tensor(o.argmax.data(), ScalarType::kI32, {c.C});
  a.sample = borrow_tensor(o.sample.data(), ScalarType::kI32, {c.C});
  a.argmax_logprob = borrow_tensor(o.logprob.data(), ScalarType::kF32, {c.C});
  a.argmax_gap = borrow_tensor(o.argmax_gap.data(), ScalarType::kF32, {c.C});
  a.sample_gap = borrow_tensor(o.sample_gap.data(), ScalarType::kF32, {c.C});
  if (c.top_n > 0) {
    a.top_n = c.top_n;
    a.top_ids = borrow_tensor(o.top_ids.data(), ScalarType::kI32, {c.C, c.top_n});
    a.top_logprobs = borrow_tensor(o.top_lp.data(), ScalarType::kF32, {c.C, c.top_n});
  }
  be->sampler(a);
  return o;
}

// The launcher's passes (sampler/sampler.cu launch_sampler), emulated, over all canvases in one batch.
std::vector<Outputs> run_emulated(const std::vector<Canvas>& cs, int64_t V, int splits, const Pass& pass,
                                  const std::vector<uint4>& z_tables) {
  const int n = static_cast<int>(cs.size());
  std::vector<Outputs> out(cs.size());
  SamplerBatch b;
  b.n = n;
  b.splits = splits;
  int64_t rows = 0, top_entries = 0, max_c = 0;
  bool any_top = false, any_probs = false, any_gap = false;
  for (int i = 0; i < n; ++i) {
    const Canvas& c = cs[static_cast<size_t>(i)];
    Outputs& o = out[static_cast<size_t>(i)];
    o.size(c);
    SamplerLaunch& a = b.c[i];
    a.logits = o.logits.data();
    a.C = c.C, a.V = V;
    a.softcap = c.cap, a.temperature = c.T, a.sample_key = c.key;
    a.want_probs = c.want_probs, a.want_sample = c.want_sample;
    a.entropy = o.entropy.data(), a.argmax = o.argmax.data(), a.sample = o.sample.data();
    a.argmax_logprob = o.logprob.data();
    a.argmax_gap = c.gaps ? o.argmax_gap.data() : nullptr;
    a.sample_gap = c.gaps ? o.sample_gap.data() : nullptr;
    a.top_n = c.top_n, a.top_ids = o.top_ids.data(), a.top_logprobs = o.top_lp.data();
    if (!c.mask.empty()) {
      a.gap_mask = c.mask.data();
      a.gap_first = c.gap_first, a.gap_last = c.gap_last, a.gap_limit = c.limit;
      any_gap = true;
    }
    a.row0 = rows, a.top0 = top_entries;
    rows += c.C;
    top_entries += c.C * splits * c.top_n;
    max_c = std::max(max_c, c.C);
    any_top |= c.top_n > 0;
    any_probs |= c.want_probs;
  }
  std::vector<Stats> partials(static_cast<size_t>(rows * splits));
  std::vector<float> slice_max(static_cast<size_t>(rows * splits)), row_bsum(static_cast<size_t>(rows));
  std::vector<float> row_floor(static_cast<size_t>(rows), -INFINITY);
  std::vector<TopEntry> top(static_cast<size_t>(std::max<int64_t>(top_entries, 1)));
  const SamplerBatch* bp = &b;
  const int mc = static_cast<int>(max_c);
  emu::launch_3d([&] { slice_max_kernel(bp, slice_max.data()); }, splits, mc, n, 0, kThreads);
  if (any_top) emu::launch_3d([&] { topn_partial_kernel(bp, top.data()); }, splits, mc, n, 0, kTopThreads);
  float* const sm = slice_max.data();
  float* const rf = row_floor.data();
  Stats* const pt = partials.data();
  const uint4* zt = z_tables.data();
  // The launcher's choice: the guided instance when a canvas of the batch has a gap.
  std::function<void()> stats;
  if (pass.one_candidate && any_gap)
    stats = [=] { slice_stats_kernel<1, true>(bp, sm, rf, zt, pt); };
  else if (pass.one_candidate)
    stats = [=] { slice_stats_kernel<1>(bp, sm, rf, zt, pt); };
  else if (any_gap)
    stats = [=] { slice_stats_kernel<kCandidates, true>(bp, sm, rf, zt, pt); };
  else stats = [=] { slice_stats_kernel<>(bp, sm, rf, zt, pt); };
  emu::launch_3d(stats, splits, mc, n, 0, kThreads);
  emu::launch_3d([&] { finalize_kernel(bp, slice_max.data(), partials.data(), row_bsum.data(), row_floor.data(), top.data()); },
                 mc, n, 1, 0, 32);
  if (any_probs) emu::launch_3d([&] { probs_kernel(bp, slice_max.data(), row_bsum.data()); }, splits, mc, n, 0, kThreads);
  return out;
}

bool same_f32(float a, float b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Every output of one canvas against the CPU's.
void expect_cpu(const std::string& at, const Canvas& c, const Outputs& g, const Outputs& w) {
  for (int64_t p = 0; p < c.C; ++p) {
    const std::string row = at + " row " + std::to_string(p);
    EXPECT_EQ(g.argmax[p], w.argmax[p]) << row;
    EXPECT_EQ(g.sample[p], w.sample[p]) << row;
    EXPECT_TRUE(c.allowed(p, g.argmax[p]) && c.allowed(p, g.sample[p])) << row << ": a masked token chosen";
    // The entropy within the bound the kernels' comments derive for their fp32 runs, 5.4e-7 (1 + 2 H),
    // and the output's rounding (tests/gpu allows the device 1e-5 (1 + H)); seen: 4e-8 (1 + H).
    const double H = w.entropy[p];
    EXPECT_NEAR(g.entropy[p], H, 6e-7 * (1.0 + 2.0 * std::fabs(H))) << row;
    EXPECT_NEAR(g.logprob[p], w.logprob[p], 1e-5 + 1e-6 * std::fabs(w.logprob[p])) << row;
    if (c.gaps) {  // the same z and the same exact noise: bit for bit
      EXPECT_TRUE(same_f32(g.argmax_gap[p], w.argmax_gap[p])) << row << ": " << g.argmax_gap[p] << " vs " << w.argmax_gap[p];
      EXPECT_TRUE(same_f32(g.sample_gap[p], w.sample_gap[p])) << row << ": " << g.sample_gap[p] << " vs " << w.sample_gap[p];
    }
    for (int j = 0; j < c.top_n; ++j) {
      const size_t k = static_cast<size_t>(p * c.top_n + j);
      EXPECT_EQ(g.top_ids[k], w.top_ids[k]) << row << " top " << j;
      if (g.top_lp[k] != w.top_lp[k]) {  // a masked token's -inf on both sides is equal
        EXPECT_NEAR(g.top_lp[k], w.top_lp[k], 1e-5 + 1e-6 * std::fabs(w.top_lp[k])) << row << " top " << j;
      }
    }
  }
  if (!c.want_probs) {
    EXPECT_EQ(g.logits, c.logits) << at << ": logits written without want_probs";
    return;
  }
  // bf16(exp(bf16(z) - max) / sum): the same terms (the host's expf) or their table values, the
  // denominator summed in fp32 runs against the CPU's double sum: one bf16 step at most, rarely.
  size_t off = 0;
  for (size_t i = 0; i < w.logits.size(); ++i) {
    if (g.logits[i] == w.logits[i]) continue;
    const int step = std::abs(static_cast<int>(g.logits[i]) - static_cast<int>(w.logits[i]));
    ASSERT_LE(step, 1) << at << ": probability " << i << " is " << bf16_to_f32(g.logits[i]) << ", CPU "
                       << bf16_to_f32(w.logits[i]);
    ++off;
  }
  EXPECT_LE(off, w.logits.size() / 100) << at << ": probabilities one bf16 step off";
  const int64_t V = static_cast<int64_t>(w.logits.size()) / c.C;
  for (int64_t p = 0; p < c.C; ++p)
    for (int64_t v = 0; v < V; ++v)
      if (!c.allowed(p, v)) {
        ASSERT_EQ(g.logits[static_cast<size_t>(p * V + v)], 0) << at << ": masked token " << v;
      }
}

// Logits: broad noise with a few strong candidates (peaked) or all within a narrow band (flat: the
// noise decides); the last row of each canvas has an exact tie for the maximum, and with `saturated`
// its first row holds logits far beyond the soft-cap (different logits of the same z: the lowest
// index wins) and infinities.
std::vector<uint16_t> make_logits(std::mt19937_64& rng, int64_t C, int64_t V, bool flat, bool saturated) {
  std::normal_distribution<float> nd(0.0f, flat ? 0.05f : 2.0f);
  std::uniform_int_distribution<int64_t> at(0, V - 1);
  std::uniform_real_distribution<float> strong(8.0f, 25.0f);
  std::vector<uint16_t> l(static_cast<size_t>(C * V));
  for (auto& x : l) x = f32_to_bf16(nd(rng));
  for (int64_t p = 0; p < C; ++p)
    if (!flat)
      for (int j = 0; j < 5; ++j) l[static_cast<size_t>(p * V + at(rng))] = f32_to_bf16(strong(rng));
  const int64_t a = at(rng) / 2, b = V / 2 + at(rng) / 2;
  l[static_cast<size_t>((C - 1) * V + a)] = l[static_cast<size_t>((C - 1) * V + b)] = f32_to_bf16(flat ? 1.0f : 40.0f);
  if (saturated) {
    for (int j = 0; j < 6; ++j) l[static_cast<size_t>(at(rng))] = f32_to_bf16(2000.0f + 500.0f * static_cast<float>(j));
    l[static_cast<size_t>(at(rng))] = 0x7f80;  // +inf: z = cap / T as well
    l[static_cast<size_t>(at(rng))] = 0xff80;  // -inf
  }
  return l;
}

struct Case {
  std::string name;
  int64_t V;
  int splits;
  bool flat;
};

// The z tables of the batch (z_exp_table_kernel, one thread an entry).
std::vector<uint4> make_tables(const std::vector<Canvas>& cs) {
  SamplerBatch b;
  b.n = static_cast<int>(cs.size());
  for (size_t i = 0; i < cs.size(); ++i) b.c[i].softcap = cs[i].cap, b.c[i].temperature = cs[i].T;
  std::vector<uint4> t(cs.size() * kZTable);
  const SamplerBatch* bp = &b;
  emu::launch_independent([&] { z_exp_table_kernel(bp, t.data()); }, kZTable / 256, b.n, 256);
  return t;
}

// The guided gaps of a case: every canvas but `unguided` gets a random mask over `limit` ids (each
// allowed with probability `density`, at least one) on its rows from 1 (canvases of one row: 0) on.
struct Guiding {
  double density = 0.5;
  int32_t limit = 0;  // <= V; ids at or past it are never allowed (their bits set or not)
  int unguided = -1;
};

std::vector<uint32_t> make_mask(std::mt19937_64& rng, const Guiding& g) {
  std::vector<uint32_t> m(static_cast<size_t>((g.limit + 31) / 32), 0);
  std::bernoulli_distribution on(g.density);
  for (int32_t id = 0; id < g.limit; ++id)
    if (on(rng)) m[static_cast<size_t>(id >> 5)] |= 1u << (id & 31);
  const int32_t one = static_cast<int32_t>(rng() % static_cast<uint64_t>(g.limit));
  m[static_cast<size_t>(one >> 5)] |= 1u << (one & 31);
  // The bits past `limit` in its last word are set too: the limit, not the bit, excludes those ids.
  if (g.limit % 32 != 0) m[static_cast<size_t>(g.limit >> 5)] |= ~0u << (g.limit & 31);
  return m;
}

// Four canvases of different rows and settings in one launch, through the given forms of the main
// pass (with `guiding`, some of them guided).
void run_case(const Case& k, const std::vector<float>& temps, uint64_t seed,
              std::initializer_list<Pass> passes, const Guiding* guiding = nullptr) {
  std::mt19937_64 rng(seed);
  std::vector<Canvas> cs;
  const int64_t rows[4] = {2, 1, 2, 1};
  for (size_t i = 0; i < temps.size(); ++i) {
    Canvas c;
    c.C = rows[i % 4];
    c.T = temps[i];
    c.key = rng::stream_key(seed, i, 5, rng::kSample);
    c.want_sample = i != 1;          // canvas 1 greedy
    c.want_probs = i != 2;           // canvas 2 without probabilities
    c.gaps = i == 3;                 // canvas 3 asks for the gaps: every noise value exact
    c.top_n = i == 0 ? 5 : 0;
    c.logits = make_logits(rng, c.C, k.V, k.flat, i == 0);
    if (guiding != nullptr && static_cast<int>(i) != guiding->unguided) {
      c.mask = make_mask(rng, *guiding);
      c.limit = guiding->limit;
      c.gap_first = c.C > 1 ? 1 : 0;
      c.gap_last = static_cast<int32_t>(c.C);
    }
    cs.push_back(std::move(c));
  }
  std::vector<Outputs> want;
  for (const Canvas& c : cs) want.push_back(run_cpu(c, k.V));
  const std::vector<uint4> tables = make_tables(cs);
  for (const Pass& pass : passes) {
    const std::vector<Outputs> got = run_emulated(cs, k.V, k.splits, pass, tables);
    for (size_t i = 0; i < cs.size(); ++i)
      expect_cpu(k.name + " (" + pass.name() + ") canvas " + std::to_string(i), cs[i], got[i], want[i]);
  }
}

// Slices of 20,480 logits: five rounds of 512 threads x 8.
TEST(SamplerEmulated, VectorSlicesOverSeveralRounds) {
  run_case({"V40960 / 2", 40960, 2, false}, {0.8f, 1.0f, 0.6f, 0.7f}, 1, {kMain});
}

// Every logit within the noise's reach: the screen and the candidates at work; with one candidate a
// warp kept, the rest take the overflow's exact path.
TEST(SamplerEmulated, FlatRowsEveryLogitWithinReach) {
  run_case({"flat V40960 / 2", 40960, 2, true}, {0.8f, 0.9f, 0.5f, 1.0f}, 2, {kMain, kOneCandidate});
}

// 4,104 = 3 x 1,368: aligned slices of 171 chunks (a partial round: idle lanes).
TEST(SamplerEmulated, VectorSlicesPartialRound) {
  run_case({"V4104 / 3", 4104, 3, false}, {0.8f, 0.408f, 1.2f, 0.8f}, 3, {kMain, kOneCandidate});
}

// Slices of 1,001 (odd lengths: one logit a round).
TEST(SamplerEmulated, ScalarSlices) {
  run_case({"V3003 / 3", 3003, 3, false}, {0.8f, 0.7f, 0.6f, 1.0f}, 4, {kMain});
  run_case({"flat V3003 / 3", 3003, 3, true}, {0.8f, 0.7f, 0.6f, 1.0f}, 5, {kMain, kOneCandidate});
}

// Small temperatures (cap / T from 100 to 600): most rows' z span more than the e^z table serves
// (the per-element exps), the rows holding the saturated logits are served.
TEST(SamplerEmulated, SmallTemperatures) {
  run_case({"V8192 / 2", 8192, 2, false}, {0.3f, 0.05f, 0.1f, 0.2f}, 6, {kMain});
}

// Guided gaps: half the vocabulary allowed (the strong candidates knocked out at random), a sparse
// mask whose allowed maximum lies far below the row's, and a single allowed token (entropy 0, every
// sample the same); a constraint vocabulary shorter than the row (ids past it never allowed); greedy
// and sampling canvases, with and without probabilities, top-N and exact noise, next to an unguided
// canvas in the same launch.
TEST(SamplerEmulated, GuidedGapsSeeOnlyTheirMask) {
  const Guiding half{0.5, 40960, 1}, sparse{0.002, 40960 - 77, 2};
  run_case({"guided half V40960 / 2", 40960, 2, false}, {0.8f, 1.0f, 0.6f, 0.7f}, 21, {kMain}, &half);
  run_case({"guided sparse V40960 / 2", 40960, 2, false}, {0.8f, 1.0f, 0.6f, 0.7f}, 22,
           {kMain, kOneCandidate}, &sparse);
  const Guiding flat{0.3, 4104, 0}, single{0.0, 3003, 3};
  run_case({"guided flat V4104 / 3", 4104, 3, true}, {0.8f, 0.408f, 1.2f, 0.8f}, 23, {kMain, kOneCandidate},
           &flat);
  run_case({"guided single V3003 / 3", 3003, 3, false}, {0.8f, 0.7f, 0.6f, 1.0f}, 24, {kMain}, &single);
  const Guiding cold{0.1, 8192, 1};
  run_case({"guided cold V8192 / 2", 8192, 2, false}, {0.3f, 0.05f, 0.1f, 0.2f}, 25, {kMain}, &cold);
}

// The main pass's hash with the row's half computed once is rng::bits, bit for bit, over the range of
// its indices (below 2^31) and any position.
TEST(SamplerEmulated, CounterBitsAreTheRngBits) {
  std::mt19937_64 rng(11);
  const uint32_t positions[] = {0u, 1u, 255u, 0x61C88646u, 0xFFFFFFFFu};
  const uint32_t indices[] = {0u, 1u, 7u, 262143u, 0x7FFFFFFEu, 0x7FFFFFFFu};
  for (int trial = 0; trial < 2000; ++trial) {
    const uint64_t key = rng();
    const uint32_t pos = trial < 5 ? positions[trial] : static_cast<uint32_t>(rng());
    const CounterHash h = counter_hash(key, pos);
    for (uint32_t v : indices) ASSERT_EQ(counter_bits(h, v), rng::bits(key, pos, v)) << key << " " << pos << " " << v;
    const uint32_t v = static_cast<uint32_t>(rng() >> 33);
    ASSERT_EQ(counter_bits(h, v), rng::bits(key, pos, v)) << key << " " << pos << " " << v;
  }
}

// The fp32 noise estimate against the double noise, at the bound its comment claims (the emulator's
// fast logarithm errs by its documented maximum): random bits, and the edges of u's
// range and of the estimates' cases (u near 1/2, 1 - u near 1/16, u = 1: +inf).
TEST(SamplerEmulated, NoiseEstimatesWithinTheirBounds) {
  std::mt19937_64 rng(12);
  std::vector<uint64_t> ms = {0, 1, 2, (uint64_t{1} << 52) - 1, uint64_t{1} << 52, (uint64_t{1} << 52) + 1,
                              (uint64_t{1} << 53) - 3, (uint64_t{1} << 53) - 2};
  const uint64_t sixteenth = (uint64_t{1} << 53) - (uint64_t{1} << 49);  // 1 - u = 1/16
  for (int64_t d = -4; d <= 4; ++d) ms.push_back(sixteenth + static_cast<uint64_t>(d));
  for (int i = 0; i < 200000; ++i) ms.push_back(rng() >> 11);
  for (int i = 0; i < 20000; ++i) ms.push_back((uint64_t{1} << 53) - 1 - (rng() >> (11 + rng() % 50)));  // 1 - u tiny
  const float zs[] = {0.0f, 12.5f, -37.5f, 300.0f};
  for (uint64_t m : ms) {
    const uint64_t b = (m << 11) | (rng() & 0x7FF);
    const double g = rng::gumbel_from_bits(b);
    for (float z : zs) {
      const double want = static_cast<double>(z) + g;
      const float est = noise_estimate(b, __fadd_rn(z, kLnLn2));
      if (std::isinf(want)) {
        ASSERT_TRUE(std::isinf(est) && est > 0) << m;
        continue;
      }
      ASSERT_LE(std::fabs(est - want), 1.2e-5 + std::ldexp(std::fabs(want), -23)) << "m " << m << " z " << z;
    }
  }
}

// The warp maximum through the integer reduction, over values of both signs, zeros and -inf.
TEST(SamplerEmulated, WarpMaxOfAnySign) {
  std::mt19937_64 rng(13);
  std::normal_distribution<float> nd(0.0f, 50.0f);
  for (int trial = 0; trial < 20; ++trial) {
    float in[32], out[32];
    for (float& x : in) x = nd(rng);
    if (trial % 4 == 1)
      for (float& x : in) x = -std::fabs(x);
    if (trial % 4 == 2) in[trial] = -INFINITY, in[3] = 0.0f, in[7] = -0.0f;
    if (trial % 4 == 3)
      for (float& x : in) x = -INFINITY;
    emu::launch([&] { out[threadIdx.x] = warp_max_f32(in[threadIdx.x]); }, 1, 1, 0, 32);
    const float want = *std::max_element(in, in + 32);
    for (float x : out) ASSERT_EQ(x, want) << trial;
  }
}

// Which rows the e^z table serves: all of them while cap / T is at most 60 (z spans [-cap / T, cap / T]),
// past that the rows whose largest z is near cap / T; never a NaN row.
TEST(SamplerEmulated, ExpTableWindow) {
  auto serves = [](float cap, float T, float m) { return exp_table_serves(exp_table_shift(cap, T), m, round_bf16(m)); };
  for (float T : {2.0f, 1.0f, 0.8f, 0.5f}) {
    EXPECT_TRUE(serves(30.0f, T, 30.0f / T)) << T;
    EXPECT_TRUE(serves(30.0f, T, -30.0f / T)) << T;
  }
  EXPECT_TRUE(serves(30.0f, 0.408f, -45.0f));  // c = 73.5 - 80: m - c >= -40 from m = -46.5 on
  EXPECT_TRUE(serves(30.0f, 0.05f, 600.0f));
  EXPECT_TRUE(serves(30.0f, 0.05f, 481.0f));
  EXPECT_FALSE(serves(30.0f, 0.05f, 479.0f));
  EXPECT_FALSE(serves(30.0f, 0.05f, 0.0f));
  EXPECT_FALSE(serves(30.0f, 0.8f, NAN));
}

}  // namespace
}  // namespace dgemma::cuda
