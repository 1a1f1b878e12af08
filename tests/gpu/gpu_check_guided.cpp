// Guided gaps (backend.h GuidedGap; docs/API.md "Guided decoding on the canvas") on the CUDA backend
// against the CPU backend:
//  - the sampler: canvases of one batch, some with a gap (random token masks: dense, sparse, a
//    constraint vocabulary shorter than the row), some without, greedy and sampling, with filters and
//    top-N, held to the bounds the unguided sampler is held to (gpu_check_ops.cpp run_sampler); every
//    chosen token allowed and every masked probability exactly 0; and the rows outside the gaps (the
//    unguided canvases and a guided canvas's other rows) bit-identical to the same batch run without
//    gaps (the unguided kernel instance);
//  - decide: the guided walk over random automata (regexes, a JSON schema, choices), gaps anywhere,
//    pins, several canvases a launch, bit-identical to the CPU.
// The end-to-end guided trajectory on the tiny model is in gpu_check_trajectory.cpp.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/decide_rules.h"
#include "engine/guided_tables.h"
#include "gpu_check_util.h"
#include "guided/guided.h"
#include "guided/token_constraint.h"
#include "util/bf16.h"
#include "util/counter_rng.h"

namespace dgemma::gpu_test {
namespace {

// ---- sampler ----------------------------------------------------------------------------------

struct SamplerCanvas {
  bool guided = true;
  double density = 0.5;    // of the random mask
  int32_t limit_less = 0;  // the constraint's vocabulary is V - limit_less ids
  float T = 0.8f;
  bool greedy = false, probs = true;
  SampleFilter filter;
  int top_n = 0;
};

// One canvas's inputs and its arguments on each backend (and on the GPU without the gap).
struct SamplerSide {
  Tensor logits;               // host
  std::vector<uint32_t> mask;  // host bits
  GuidedTables cpu_tables, gpu_tables;
  int32_t first = 0, last = 0, limit = 0;
  SamplerArgs ca, ga, plain;
  bool allowed(int64_t p, int64_t id) const {
    return mask.empty() || p < first || p >= last ||
           (id < limit && ((mask[static_cast<size_t>(id >> 5)] >> (id & 31)) & 1u) != 0);
  }
};

void fill_args(SamplerArgs& a, const Tensor& logits, bool gpu, const SamplerCanvas& k, uint64_t key) {
  const int64_t C = logits.dim(0);
  auto out = [&](ScalarType t, std::initializer_list<int64_t> dims) {
    return gpu ? poisoned(t, dims) : host_tensor(t, dims);
  };
  a.logits = gpu ? up(logits) : clone(logits);
  a.softcap = 30.0f;
  a.temperature = k.T;
  a.sample_key = key;
  a.want_probs = k.probs;
  a.want_sample = !k.greedy;
  a.entropy = out(ScalarType::kF32, {C});
  a.argmax = out(ScalarType::kI32, {C});
  a.sample = out(ScalarType::kI32, {C});
  a.argmax_logprob = out(ScalarType::kF32, {C});
  if (!gpu) {  // the CPU's margins decide which differences are near-ties
    a.argmax_gap = out(ScalarType::kF32, {C});
    a.sample_gap = out(ScalarType::kF32, {C});
  }
  a.filter = k.greedy ? SampleFilter{} : k.filter;
  a.sample_floor = out(ScalarType::kF32, {C});
  if (k.top_n > 0) {
    a.top_n = k.top_n;
    a.top_ids = out(ScalarType::kI32, {C, k.top_n});
    a.top_logprobs = out(ScalarType::kF32, {C, k.top_n});
  }
}

void run_guided_sampler(Reporter& r, const std::string& name, int64_t C, int64_t V,
                        const std::vector<SamplerCanvas>& ks) {
  Data d("guided sampler " + name);
  std::vector<SamplerSide> sides(ks.size());
  std::vector<SamplerArgs> gpu_args, plain_args;
  for (size_t i = 0; i < ks.size(); ++i) {
    const SamplerCanvas& k = ks[i];
    SamplerSide& s = sides[i];
    s.logits = d.bf16({C, V}, 2.0f);
    uint16_t* lp = s.logits.ptr<uint16_t>();
    for (int64_t p = 0; p < C; ++p)
      for (int j = 0; j < 5; ++j) lp[p * V + d.integer(0, V - 1)] = f32_to_bf16(d.uniform(8.0f, 25.0f));
    const uint64_t key = rng::stream_key(run_seed(), i, 3, rng::kSample);
    fill_args(s.ca, s.logits, false, k, key);
    fill_args(s.ga, s.logits, true, k, key);
    fill_args(s.plain, s.logits, true, k, key);
    if (k.guided) {
      s.limit = static_cast<int32_t>(V) - k.limit_less;
      s.mask.assign(static_cast<size_t>((s.limit + 31) / 32), 0u);
      for (int32_t id = 0; id < s.limit; ++id)
        if (d.uniform(0.0f, 1.0f) < k.density) s.mask[static_cast<size_t>(id >> 5)] |= 1u << (id & 31);
      const int64_t one = d.integer(0, s.limit - 1);
      s.mask[static_cast<size_t>(one >> 5)] |= 1u << (one & 31);
      if (s.limit % 32 != 0) s.mask.back() |= ~0u << (s.limit & 31);  // the limit, not the bits, excludes
      const Tensor host_mask =
          borrow_tensor(s.mask.data(), ScalarType::kI32, {static_cast<int64_t>(s.mask.size())});
      s.cpu_tables.vocab_size = s.gpu_tables.vocab_size = s.limit;
      s.cpu_tables.gap_mask = host_mask;
      s.gpu_tables.gap_mask = up(host_mask);
      s.first = C > 2 ? static_cast<int32_t>(d.integer(0, 1)) : 0;
      s.last = static_cast<int32_t>(C > 2 ? C - d.integer(0, 1) : C);
      s.ca.guided = GuidedGap{&s.cpu_tables, s.first, s.last, 0, s.last - s.first};
      s.ga.guided = GuidedGap{&s.gpu_tables, s.first, s.last, 0, s.last - s.first};
    }
  }
  for (SamplerSide& s : sides) {
    cpu().sampler(s.ca);
    gpu_args.push_back(s.ga);
    plain_args.push_back(s.plain);
  }
  cuda().sampler_batch(gpu_args);
  cuda().sampler_batch(plain_args);

  int64_t near = 0;
  for (size_t i = 0; i < ks.size(); ++i) {
    const SamplerCanvas& k = ks[i];
    const SamplerSide& s = sides[i];
    const std::string at = name + " canvas " + std::to_string(i) + (k.guided ? " (guided)" : "");
    const auto am_c = i32(s.ca.argmax), am_g = i32(s.ga.argmax), sm_c = i32(s.ca.sample),
               sm_g = i32(s.ga.sample);
    const auto agap = f32(s.ca.argmax_gap), sgap = f32(s.ca.sample_gap);
    // Decisions: as run_sampler (z within a few fp32 ulps of tanhf: only margins below 1e-4 may differ).
    for (int64_t p = 0; p < C; ++p) {
      if (!s.allowed(p, am_g[p]) || !s.allowed(p, sm_g[p]))
        r.fail(at + ": a masked token chosen at row " + std::to_string(p));
      if (agap[p] == 0.0f || agap[p] > 1e-4f) {
        if (am_c[p] != am_g[p])
          r.fail(at + ": argmax of row " + std::to_string(p) + " differs (margin " + fmt_double(agap[p]) +
                 ")");
      } else {
        ++near;
      }
      if (sgap[p] > 1e-4f) {
        if (sm_c[p] != sm_g[p])
          r.fail(at + ": sample of row " + std::to_string(p) + " differs (margin " + fmt_double(sgap[p]) +
                 ")");
      } else {
        ++near;
      }
    }
    expect_f32(r, at + " entropy", f32(s.ga.entropy), f32(s.ca.entropy), 1e-5, 1e-5);
    expect_f32(r, at + " argmax_logprob", f32(s.ga.argmax_logprob), f32(s.ca.argmax_logprob), 1e-5, 1e-6);
    if (s.ca.filter.active())
      expect_f32(r, at + " sample_floor", f32(s.ga.sample_floor), f32(s.ca.sample_floor), 4e-5, 0.0);
    if (k.top_n > 0) {
      // A masked alternative's -inf on both sides; the others as gpu_check_sample_filter.cpp.
      const auto lc = f32(s.ca.top_logprobs), lg = f32(s.ga.top_logprobs);
      const auto ic = i32(s.ca.top_ids), ig = i32(s.ga.top_ids);
      for (size_t j = 0; j < lc.size(); ++j) {
        if (std::isinf(lc[j]) || std::isinf(lg[j])) {
          if (lc[j] != lg[j] || ic[j] != ig[j])
            r.fail(at + ": masked alternative " + std::to_string(j) + " differs");
          continue;
        }
        if (std::fabs(lc[j] - lg[j]) > 2e-5 + 1e-6 * std::fabs(lc[j]))
          r.fail(at + ": top log-probability " + std::to_string(j));
        const bool near_prev = j % k.top_n > 0 && std::fabs(lc[j] - lc[j - 1]) < 2e-5f;
        const bool near_next = (j + 1) % k.top_n != 0 && std::fabs(lc[j] - lc[j + 1]) < 2e-5f;
        if (ic[j] != ig[j] && !near_prev && !near_next)
          r.fail(at + ": alternative " + std::to_string(j) + " differs");
      }
    }
    const auto probs = u16(s.ga.logits);
    if (k.probs) {
      expect_bf16(r, at + " probs", probs, u16(s.ca.logits), Tol{1, 0.0, 0.0, 0.95, 1e-4});
      for (int64_t p = 0; p < C; ++p)
        for (int64_t v = 0; v < V; ++v)
          if (!s.allowed(p, v) && probs[static_cast<size_t>(p * V + v)] != 0) {
            r.fail(at + ": masked token " + std::to_string(v) + " of row " + std::to_string(p) +
                   " has a probability");
            p = C;
            break;
          }
    }
    // Outside the gap: the unguided kernel's bits.
    const auto pe = f32(s.plain.entropy), ge = f32(s.ga.entropy);
    const auto pa = i32(s.plain.argmax), ps = i32(s.plain.sample);
    const auto pp = u16(s.plain.logits);
    for (int64_t p = 0; p < C; ++p) {
      if (k.guided && p >= s.first && p < s.last) continue;
      const bool same_row = std::equal(pp.begin() + p * V, pp.begin() + (p + 1) * V, probs.begin() + p * V);
      if (pe[p] != ge[p] || pa[p] != am_g[p] || ps[p] != sm_g[p] || !same_row)
        r.fail(at + ": row " + std::to_string(p) + " outside the gap differs from the batch without gaps");
    }
  }
  r.note(name + ": near-tie decisions exempted: " + std::to_string(near));
}

void check_guided_sampler(Reporter& r) {
  SampleFilter topk;
  topk.top_k = 40;
  topk.top_p = 0.9;
  SamplerCanvas plain;
  plain.guided = false;
  SamplerCanvas half, sparse, greedy, filtered, single;
  sparse.density = 0.002;
  sparse.limit_less = 77;
  sparse.T = 0.6f;
  greedy.greedy = true;
  greedy.probs = false;
  filtered.filter = topk;
  filtered.top_n = 5;
  single.density = 0.0;
  single.top_n = 3;
  run_guided_sampler(r, "V262144 C8 mixed", 8, 262144, {half, plain, sparse, greedy, filtered, single});
  run_guided_sampler(r, "V512 C16", 16, 512, {plain, half, sparse, filtered});
  run_guided_sampler(r, "V262144 C256 one guided canvas", 256, 262144, {sparse});
}

// ---- decide -----------------------------------------------------------------------------------

constexpr int32_t kVocab = 120;

// Ids 0 and 1 filler, 2 never allowed, then one piece per character and random pieces of 1 to 3 bytes.
std::shared_ptr<const guided::TokenVocabulary> vocabulary(Data& d) {
  const std::string chars = "ab{}\":, 0123x";
  std::vector<std::string> pieces = {"", "", ""};
  std::vector<guided::TokenKind> kinds = {guided::TokenKind::kFiller, guided::TokenKind::kFiller,
                                          guided::TokenKind::kNever};
  for (char c : chars) pieces.push_back(std::string(1, c)), kinds.push_back(guided::TokenKind::kText);
  while (static_cast<int32_t>(pieces.size()) < kVocab) {
    std::string p;
    for (int64_t i = 0, n = d.integer(1, 3); i < n; ++i)
      p += chars[static_cast<size_t>(d.integer(0, chars.size() - 1))];
    pieces.push_back(p);
    kinds.push_back(guided::TokenKind::kText);
  }
  return guided::TokenVocabulary::from_pieces(pieces, kinds);
}

// `n` tokens from `state`, each a random allowed step with probability `follow`, else any id.
std::vector<int32_t> walk_from(Data& d, const guided::TokenConstraint& c, int32_t state, int64_t n,
                               double follow) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    int32_t t = static_cast<int32_t>(d.integer(0, kVocab - 1));
    if (state >= 0 && d.uniform(0.0f, 1.0f) < follow) {
      std::vector<int32_t> ok;
      for (int32_t id = 0; id < kVocab; ++id)
        if (c.step(state, id) >= 0) ok.push_back(id);
      if (!ok.empty()) t = ok[static_cast<size_t>(d.integer(0, static_cast<int64_t>(ok.size()) - 1))];
    }
    if (state >= 0) state = c.step(state, t);
    out.push_back(t);
  }
  return out;
}

struct DecideInputs {
  int64_t C = 0;
  bool greedy = false;
  std::vector<float> entropy;
  std::vector<int32_t> argmax, sample, prev, pin_tokens;
  std::vector<uint8_t> pin_mask;
  int k = -1;  // constraint index (-1: no gap)
  int32_t first = 0, last = 0, state = 0;
  int64_t room = 0;
  float bound = 0.1f;
  uint64_t key = 0;
};

DecideArgs decide_args(Backend& be, const DecideInputs& in, const GuidedTables* tables,
                       std::vector<Tensor>& keep) {
  const int64_t C = in.C;
  auto put = [&](ScalarType t, const void* data) {
    Tensor x = be.alloc(t, {C});
    be.from_host(x, data);
    keep.push_back(x);
    return x;
  };
  const std::vector<int32_t> minus(static_cast<size_t>(C), -1);
  const std::vector<uint8_t> nine(static_cast<size_t>(C), 9);
  DecideArgs a;
  a.entropy = put(ScalarType::kF32, in.entropy.data());
  a.argmax = put(ScalarType::kI32, in.argmax.data());
  a.sample = put(ScalarType::kI32, in.sample.data());
  a.prev_argmax = put(ScalarType::kI32, in.prev.data());
  a.canvas = put(ScalarType::kI32, minus.data());
  a.accept = put(ScalarType::kU8, nine.data());
  a.flags = be.alloc(ScalarType::kI32, {2});
  be.from_host(a.flags, minus.data());
  keep.push_back(a.flags);
  if (!in.pin_mask.empty()) {
    a.pin_mask = put(ScalarType::kU8, in.pin_mask.data());
    a.pin_tokens = put(ScalarType::kI32, in.pin_tokens.data());
  }
  a.greedy = in.greedy;
  a.have_prev = true;
  a.entropy_bound = in.bound;
  a.confidence_threshold = 0.3f;
  a.renoise_key = in.key;
  a.vocab = kVocab;
  if (in.k >= 0) a.guided = GuidedGap{tables, in.first, in.last, in.state, in.room};
  return a;
}

void check_guided_decide(Reporter& r) {
  Data d("guided decide");
  const auto vocab = vocabulary(d);
  using guided::ConstraintSpec;
  std::vector<std::shared_ptr<const guided::TokenConstraint>> ks;
  for (const ConstraintSpec& s :
       {ConstraintSpec::regex("(ab|a)+b?"), ConstraintSpec::regex("[ab]{3,9}x"),
        ConstraintSpec::json_schema(R"({"type": "object", "properties": {"a": {"type": "integer"},
                                      "b": {"type": "string"}}, "required": ["a"]})"),
        ConstraintSpec::choice({"ab", "ba", "aab", "0x1"})})
    ks.push_back(guided::compile_for_vocabulary(s, vocab));
  GuidedTableCache cpu_cache, gpu_cache;
  int64_t canvases = 0, cut = 0, mismatched = 0;
  for (int launch = 0; launch < 30; ++launch) {
    const int n = static_cast<int>(d.integer(1, 6));
    std::vector<DecideInputs> ins;
    for (int i = 0; i < n; ++i) {
      DecideInputs in;
      in.C = launch % 5 == 4 ? 256 : d.integer(1, 80);
      in.greedy = d.integer(0, 2) == 0;
      in.bound = d.integer(0, 2) == 0 ? 1e6f : d.uniform(0.05f, 2.0f);
      in.key = rng::stream_key(d.integer(0, 1 << 30), 2, 5, rng::kRenoise);
      for (int64_t p = 0; p < in.C; ++p) {
        const float u = d.uniform(0.0f, 1.0f);
        in.entropy.push_back(launch % 2 ? static_cast<float>(d.integer(0, 4)) * 0.01f : u * u * u * 2.0f);
        in.argmax.push_back(static_cast<int32_t>(d.integer(0, kVocab - 1)));
        in.sample.push_back(static_cast<int32_t>(d.integer(0, kVocab - 1)));
        in.prev.push_back(d.integer(0, 7) == 0 ? in.argmax.back() ^ 1 : in.argmax.back());
      }
      if (d.integer(0, 1) == 0) {
        in.pin_mask.assign(static_cast<size_t>(in.C), 0);
        in.pin_tokens.assign(static_cast<size_t>(in.C), 0);
        for (int64_t p = 0; p < in.C; ++p)
          if (d.integer(0, 9) == 0)
            in.pin_mask[p] = 1, in.pin_tokens[p] = static_cast<int32_t>(d.integer(0, kVocab - 1));
      }
      if (i > 0 || d.integer(0, 1) == 0) {  // a gap
        in.k = static_cast<int>(d.integer(0, static_cast<int64_t>(ks.size()) - 1));
        const guided::TokenConstraint& c = *ks[static_cast<size_t>(in.k)];
        in.first = static_cast<int32_t>(d.integer(0, in.C - 1));
        in.last = static_cast<int32_t>(d.integer(in.first + 1, in.C));
        in.state = c.start();
        for (int32_t t : walk_from(d, c, in.state, d.integer(0, 3), 1.0)) in.state = c.step(in.state, t);
        in.room = (in.last - in.first) + d.integer(0, 11);
        std::vector<int32_t>& chosen = in.greedy ? in.argmax : in.sample;
        const std::vector<int32_t> w = walk_from(d, c, in.state, in.last - in.first, d.uniform(0.75f, 1.0f));
        for (int32_t p = in.first; p < in.last; ++p) {
          chosen[p] = w[static_cast<size_t>(p - in.first)];
          if (!in.pin_mask.empty() && in.pin_mask[p] && d.integer(0, 1) == 0) in.pin_tokens[p] = chosen[p];
        }
      }
      ins.push_back(std::move(in));
    }
    std::vector<Tensor> keep_c, keep_g;
    std::vector<DecideArgs> ca, ga;
    cpu_cache.begin_step();
    gpu_cache.begin_step();
    for (const DecideInputs& in : ins) {
      const GuidedTables* tc = in.k >= 0 ? &cpu_cache.get(cpu(), ks[static_cast<size_t>(in.k)]) : nullptr;
      const GuidedTables* tg = in.k >= 0 ? &gpu_cache.get(cuda(), ks[static_cast<size_t>(in.k)]) : nullptr;
      ca.push_back(decide_args(cpu(), in, tc, keep_c));
      ga.push_back(decide_args(cuda(), in, tg, keep_g));
    }
    for (const DecideArgs& a : ca) cpu().decide(a);
    cuda().decide_batch(ga);
    for (size_t i = 0; i < ins.size(); ++i) {
      const std::string at = "launch " + std::to_string(launch) + " canvas " + std::to_string(i);
      const bool same = i32(ca[i].canvas) == i32(ga[i].canvas) && i32(ca[i].flags) == i32(ga[i].flags) &&
                        i32(ca[i].prev_argmax) == i32(ga[i].prev_argmax);
      std::vector<uint8_t> acc_c(static_cast<size_t>(ins[i].C)), acc_g(acc_c.size());
      cpu().to_host(ca[i].accept, acc_c.data());
      cuda().to_host(ga[i].accept, acc_g.data());
      if (!same || acc_c != acc_g) {
        r.fail(at + (ins[i].k >= 0 ? " (guided)" : "") + ": CUDA's decision differs from the CPU's");
        ++mismatched;
      }
      if (ins[i].k < 0) continue;
      ++canvases;
      const std::vector<uint8_t> plain = entropy_bound_accept(ins[i].entropy, ins[i].bound, ins[i].pin_mask);
      for (int32_t p = ins[i].first; p < ins[i].last; ++p) cut += plain[p] && !acc_c[p];
    }
  }
  r.note("guided decide: " + std::to_string(canvases) + " guided canvases, " + std::to_string(cut) +
         " positions renoised by the walk, " + std::to_string(mismatched) + " canvases differ");
  if (cut == 0) r.fail("guided decide: the walk renoised nothing (the cases do not exercise it)");
}

}  // namespace

void guided_tail_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                       const std::function<void(const char*, double)>& row) {
  Backend& be = cuda();
  const int64_t C = 256, V = 262144;
  // The sampler: logits of a confident head, a gap over every row.
  Tensor raw = be.alloc(ScalarType::kBF16, {C, V}), logits = be.alloc(ScalarType::kBF16, {C, V});
  be.fill_normal(raw, 6, 0.0f, 3.0f);
  SamplerArgs sa;
  sa.logits = logits;
  sa.temperature = 0.8f;
  sa.sample_key = 42;
  sa.entropy = be.alloc(ScalarType::kF32, {C});
  sa.argmax = be.alloc(ScalarType::kI32, {C});
  sa.sample = be.alloc(ScalarType::kI32, {C});
  sa.argmax_logprob = be.alloc(ScalarType::kF32, {C});
  const double copy = time_ms([&] { be.copy(logits, raw); });
  row("sampler C=256 V=262144 unguided (-copy)", time_ms([&] {
                                                   be.copy(logits, raw);
                                                   be.sampler(sa);
                                                 }) - copy);
  std::mt19937_64 rng(5);
  for (const auto& [what, density] : {std::pair{"sampler C=256 guided, half allowed (-copy)", 0.5},
                                      std::pair{"sampler C=256 guided, 1% allowed (-copy)", 0.01}}) {
    std::vector<uint32_t> mask(static_cast<size_t>(V / 32), 0u);
    std::bernoulli_distribution on(density);
    for (int64_t id = 0; id < V; ++id)
      if (on(rng)) mask[static_cast<size_t>(id >> 5)] |= 1u << (id & 31);
    GuidedTables t;
    t.vocab_size = static_cast<int32_t>(V);
    t.gap_mask = be.upload(borrow_tensor(mask.data(), ScalarType::kI32, {V / 32}));
    SamplerArgs g = sa;
    g.guided = GuidedGap{&t, 0, static_cast<int32_t>(C), 0, C};
    row(what, time_ms([&] {
                be.copy(logits, raw);
                be.sampler(g);
              }) - copy);
  }
  // Decide: 256 chosen tokens of 1 to 4 letters that the automaton all accepts (the walk's longest).
  std::vector<std::string> pieces = {"", ""};
  std::vector<guided::TokenKind> kinds = {guided::TokenKind::kFiller, guided::TokenKind::kFiller};
  while (pieces.size() < 4096) {
    std::string p;
    for (uint64_t i = 0, n = 1 + rng() % 4; i < n; ++i) p += static_cast<char>('a' + rng() % 26);
    pieces.push_back(p);
    kinds.push_back(guided::TokenKind::kText);
  }
  const auto k = guided::compile_for_vocabulary(guided::ConstraintSpec::regex("[a-z]+"),
                                                guided::TokenVocabulary::from_pieces(pieces, kinds));
  GuidedTableCache cache;
  const GuidedTables& t = cache.get(be, k);
  std::vector<float> h(static_cast<size_t>(C));
  std::vector<int32_t> ids(static_cast<size_t>(C));
  for (int64_t p = 0; p < C; ++p) {
    h[static_cast<size_t>(p)] = static_cast<float>((p * 37) % 101) * 0.01f;
    ids[static_cast<size_t>(p)] = static_cast<int32_t>(2 + rng() % 4094);
  }
  DecideArgs d;
  d.entropy = be.alloc(ScalarType::kF32, {C});
  d.argmax = be.alloc(ScalarType::kI32, {C});
  d.sample = be.alloc(ScalarType::kI32, {C});
  d.prev_argmax = be.alloc(ScalarType::kI32, {C});
  d.canvas = be.alloc(ScalarType::kI32, {C});
  d.flags = be.alloc(ScalarType::kI32, {2});
  be.from_host(d.entropy, h.data());
  for (const Tensor* x : {&d.argmax, &d.sample, &d.prev_argmax}) be.from_host(*x, ids.data());
  d.vocab = static_cast<int32_t>(V);
  d.have_prev = true;
  row("decide C=256 unguided", time_ms([&] { be.decide(d); }));
  d.guided = GuidedGap{&t, 0, static_cast<int32_t>(C), k->start(), 4 * C};
  row("decide C=256 guided, a 256-token walk", time_ms([&] { be.decide(d); }));
}

std::vector<Case> guided_cases() {
  return {
      {"guided_sampler", check_guided_sampler},
      {"guided_decide", check_guided_decide},
  };
}

}  // namespace dgemma::gpu_test
