// The batched tail of a denoising step on the CUDA backend: sampler_batch over several canvases of
// different settings (temperature, filters, greedy, top-N, with and without probabilities) against
// the CPU's single-canvas sampler of each, and against the GPU's own single-canvas calls (which must
// agree bit for bit: the batch only changes how blocks are launched); decide_batch likewise against
// the CPU's decide of each canvas (bit-identical, pins included).
#include <cmath>
#include <string>
#include <vector>

#include "backend/decide_rules.h"
#include "gpu_check_util.h"
#include "util/bf16.h"
#include "util/counter_rng.h"

namespace dgemma::gpu_test {
namespace {

struct CanvasCase {
  float temperature;
  bool want_probs, want_sample, gaps;
  SampleFilter filter;
  int top_n;
};

SamplerArgs make_canvas(const Tensor& logits, bool gpu, uint64_t key, const CanvasCase& c) {
  const int64_t C = logits.dim(0);
  auto out = [&](ScalarType t, std::initializer_list<int64_t> dims) { return gpu ? poisoned(t, dims) : host_tensor(t, dims); };
  SamplerArgs a;
  a.logits = gpu ? up(logits) : clone(logits);
  a.softcap = 30.0f;
  a.temperature = c.temperature;
  a.sample_key = key;
  a.want_probs = c.want_probs;
  a.want_sample = c.want_sample;
  a.entropy = out(ScalarType::kF32, {C});
  a.argmax = out(ScalarType::kI32, {C});
  a.sample = out(ScalarType::kI32, {C});
  a.argmax_logprob = out(ScalarType::kF32, {C});
  // The CPU always gives the gaps (they exempt near-ties); the GPU only where the case asks.
  if (!gpu || c.gaps) {
    a.argmax_gap = out(ScalarType::kF32, {C});
    a.sample_gap = out(ScalarType::kF32, {C});
  }
  a.sample_floor = out(ScalarType::kF32, {C});
  a.filter = c.filter;
  a.top_n = c.top_n;
  if (c.top_n > 0) {
    a.top_ids = out(ScalarType::kI32, {C, c.top_n});
    a.top_logprobs = out(ScalarType::kF32, {C, c.top_n});
  }
  return a;
}

// Everything a canvas outputs, bit for bit (the batched GPU run against the single GPU run).
void expect_same(Reporter& r, const std::string& name, const SamplerArgs& g, const SamplerArgs& s) {
  if (i32(g.argmax) != i32(s.argmax)) r.fail(name + ": argmax differs from the single-canvas call");
  if (i32(g.sample) != i32(s.sample)) r.fail(name + ": sample differs from the single-canvas call");
  if (f32(g.entropy) != f32(s.entropy)) r.fail(name + ": entropy differs from the single-canvas call");
  if (f32(g.argmax_logprob) != f32(s.argmax_logprob)) r.fail(name + ": argmax_logprob differs from the single-canvas call");
  if (f32(g.sample_floor) != f32(s.sample_floor)) r.fail(name + ": sample_floor differs from the single-canvas call");
  if (u16(g.logits) != u16(s.logits)) r.fail(name + ": probabilities differ from the single-canvas call");
  if (g.top_n > 0 && (i32(g.top_ids) != i32(s.top_ids) || f32(g.top_logprobs) != f32(s.top_logprobs)))
    r.fail(name + ": top-N alternatives differ from the single-canvas call");
  if (!g.sample_gap.empty() && f32(g.sample_gap) != f32(s.sample_gap)) r.fail(name + ": sample_gap differs");
}

// The batched GPU canvas against the CPU (the tolerances of gpu_check_ops.cpp's run_sampler).
void expect_cpu(Reporter& r, const std::string& name, const SamplerArgs& g, const SamplerArgs& c, const Tensor& logits) {
  const int64_t C = logits.dim(0);
  const auto am_c = i32(c.argmax), am_g = i32(g.argmax), sm_c = i32(c.sample), sm_g = i32(g.sample);
  const auto agap = f32(c.argmax_gap), sgap = f32(c.sample_gap);
  int64_t near = 0;
  for (int64_t p = 0; p < C; ++p) {
    if (agap[p] == 0.0f || agap[p] > 1e-4f) {
      if (am_c[p] != am_g[p]) r.fail(name + ": argmax of row " + std::to_string(p) + " differs from the CPU's");
    } else {
      ++near;
    }
    if (sgap[p] > 1e-4f) {
      if (sm_c[p] != sm_g[p]) r.fail(name + ": sample of row " + std::to_string(p) + " differs from the CPU's");
    } else {
      ++near;
    }
    if (!g.want_sample && sm_g[p] != am_g[p]) r.fail(name + ": a canvas without sampling must give sample = argmax");
  }
  r.note(name + ": near-tie decisions exempted: " + std::to_string(near));
  expect_f32(r, name + " entropy", f32(g.entropy), f32(c.entropy), 1e-5, 1e-5);
  expect_f32(r, name + " argmax_logprob", f32(g.argmax_logprob), f32(c.argmax_logprob), 1e-5, 1e-6);
  expect_f32(r, name + " sample_floor", f32(g.sample_floor), f32(c.sample_floor), 4e-5, 0.0);
  if (g.want_probs) expect_bf16(r, name + " probs", u16(g.logits), u16(c.logits), Tol{1, 0.0, 0.0, 0.95, 1e-4});
  else expect_bf16(r, name + " logits untouched", u16(g.logits), u16(logits), exact_tol());
  if (g.top_n > 0) expect_f32(r, name + " top_logprobs", f32(g.top_logprobs), f32(c.top_logprobs), 2e-5, 1e-6);
}

void run_sampler_batch(Reporter& r, const std::string& name, int64_t C, int64_t V, const std::vector<CanvasCase>& cases) {
  Data d("sampler batch " + name);
  std::vector<Tensor> logits;
  std::vector<SamplerArgs> cpu_args, gpu_args, single_args;
  for (size_t i = 0; i < cases.size(); ++i) {
    // Broad noise plus a few strong candidates per row (as run_sampler's), a different draw per canvas.
    Tensor l = d.bf16({C, V}, 2.0f);
    uint16_t* lp = l.ptr<uint16_t>();
    for (int64_t p = 0; p < C; ++p)
      for (int j = 0; j < 5; ++j) lp[p * V + d.integer(0, V - 1)] = f32_to_bf16(d.uniform(6.0f, 20.0f));
    logits.push_back(l);
    const uint64_t key = rng::stream_key(run_seed(), i, 3, rng::kSample);
    cpu_args.push_back(make_canvas(l, false, key, cases[i]));
    gpu_args.push_back(make_canvas(l, true, key, cases[i]));
    single_args.push_back(make_canvas(l, true, key, cases[i]));
  }
  for (const SamplerArgs& a : cpu_args) cpu().sampler(a);
  cuda().sampler_batch(gpu_args);
  for (const SamplerArgs& a : single_args) cuda().sampler(a);
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string at = name + " canvas " + std::to_string(i);
    expect_same(r, at, gpu_args[i], single_args[i]);
    expect_cpu(r, at, gpu_args[i], cpu_args[i], logits[i]);
  }
}

void check_sampler_batch(Reporter& r) {
  const SampleFilter off{};
  run_sampler_batch(r, "V1000 C7 x5", 7, 1000,
                    {{0.8f, true, true, false, off, 0},
                     {1.0f, true, false, false, off, 3},           // greedy: no noise drawn
                     {0.6f, false, true, true, {5, 1.0, 0.0}, 0},  // top_k, gaps, no probs
                     {1.2f, true, true, false, {0, 0.9, 0.02}, 5},
                     {0.7f, true, true, true, off, 20}});
  run_sampler_batch(r, "V262144 C16 x4", 16, 262144,
                    {{0.8f, true, true, false, off, 0},
                     {1.0f, true, false, false, off, 0},
                     {0.5f, true, true, false, {40, 0.95, 0.0}, 5},
                     {1.0f, true, true, true, off, 0}});
}

// ---- decide ----------------------------------------------------------------------------------------

struct DecideCanvas {
  std::vector<float> h;
  std::vector<int32_t> am, sm, prev, pin_tok;
  std::vector<uint8_t> mask;
  bool greedy, have_prev;
  float bound;
  uint64_t key;
};

DecideArgs put_decide(Backend& be, const DecideCanvas& c, std::vector<Tensor>& keep) {
  const int64_t C = static_cast<int64_t>(c.h.size());
  auto put = [&](ScalarType t, const void* src) {
    Tensor x = be.alloc(t, {C});
    be.from_host(x, src);
    keep.push_back(x);
    return x;
  };
  DecideArgs a;
  a.entropy = put(ScalarType::kF32, c.h.data());
  a.argmax = put(ScalarType::kI32, c.am.data());
  a.sample = put(ScalarType::kI32, c.sm.data());
  a.prev_argmax = put(ScalarType::kI32, c.prev.data());
  const std::vector<int32_t> minus(static_cast<size_t>(C), -1);
  a.canvas = put(ScalarType::kI32, minus.data());
  a.flags = be.alloc(ScalarType::kI32, {2});
  be.from_host(a.flags, minus.data());
  keep.push_back(a.flags);
  a.accept = be.alloc(ScalarType::kU8, {C});
  keep.push_back(a.accept);
  if (!c.mask.empty()) {
    a.pin_mask = put(ScalarType::kU8, c.mask.data());
    a.pin_tokens = put(ScalarType::kI32, c.pin_tok.data());
  }
  a.greedy = c.greedy;
  a.have_prev = c.have_prev;
  a.entropy_bound = c.bound;
  a.confidence_threshold = 0.3f;
  a.renoise_key = c.key;
  a.vocab = 262144;
  return a;
}

void check_decide_batch(Reporter& r) {
  Data d("decide batch");
  const int64_t C = 256;
  std::vector<DecideCanvas> canvases;
  for (int i = 0; i < 6; ++i) {
    DecideCanvas c;
    for (int64_t p = 0; p < C; ++p) {
      const float u = d.uniform(0.0f, 1.0f);
      c.h.push_back(i == 1 ? static_cast<float>(d.integer(0, 4)) * 0.01f : u * u * u * 2.0f);  // canvas 1: ties
      c.am.push_back(static_cast<int32_t>(d.integer(0, 262143)));
      c.sm.push_back(static_cast<int32_t>(d.integer(0, 262143)));
      c.prev.push_back(i == 3 ? c.am.back() : (d.uniform(0.0f, 1.0f) < 0.02f ? c.am.back() ^ 1 : c.am.back()));
    }
    if (i == 2 || i == 4) {  // pinned canvases
      for (int64_t p = 0; p < C; ++p) {
        c.mask.push_back(d.uniform(0.0f, 1.0f) < 0.3f ? 1 : 0);
        c.pin_tok.push_back(c.mask.back() ? static_cast<int32_t>(d.integer(0, 262143)) : 0);
      }
    }
    c.greedy = i == 1 || i == 4;
    c.have_prev = i != 0;
    c.bound = i == 5 ? 1e6f : 0.1f + 0.1f * static_cast<float>(i);
    c.key = rng::stream_key(run_seed(), static_cast<uint64_t>(i), 5, rng::kRenoise);
    canvases.push_back(std::move(c));
  }
  std::vector<Tensor> keep_c, keep_g;
  std::vector<DecideArgs> ca, ga;
  for (const DecideCanvas& c : canvases) {
    ca.push_back(put_decide(cpu(), c, keep_c));
    ga.push_back(put_decide(cuda(), c, keep_g));
  }
  for (const DecideArgs& a : ca) cpu().decide(a);
  cuda().decide_batch(ga);
  for (size_t i = 0; i < canvases.size(); ++i) {
    const std::string at = "decide batch canvas " + std::to_string(i);
    if (i32(ga[i].canvas) != i32(ca[i].canvas)) r.fail(at + ": canvas differs from the CPU's");
    if (i32(ga[i].flags) != i32(ca[i].flags)) r.fail(at + ": flags differ from the CPU's");
    if (i32(ga[i].prev_argmax) != canvases[i].am) r.fail(at + ": prev_argmax was not replaced by the argmax");
    std::vector<uint8_t> acc_c(static_cast<size_t>(C)), acc_g(static_cast<size_t>(C));
    cpu().to_host(ca[i].accept, acc_c.data());
    cuda().to_host(ga[i].accept, acc_g.data());
    if (acc_c != acc_g) r.fail(at + ": accept mask differs from the CPU's");
    const auto f = i32(ca[i].flags);
    r.note(at + ": flags {" + std::to_string(f[0]) + "," + std::to_string(f[1]) + "}");
  }
}

}  // namespace

std::vector<Case> batch_cases() {
  return {
      {"sampler_batch", check_sampler_batch},
      {"decide_batch", check_decide_batch},
  };
}

}  // namespace dgemma::gpu_test
