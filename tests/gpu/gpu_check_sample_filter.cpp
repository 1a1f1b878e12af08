// The sampler's support filters (min_p, top_k, top_p) and top-N alternatives on the CUDA backend
// against the CPU backend: the same floor per row (up to the few-ulp z differences of tanhf), the same
// sample, and everything else bit-identical to the GPU's own unfiltered run. Timings are notes.
#include <chrono>
#include <cmath>
#include <string>

#include "gpu_check_util.h"
#include "util/bf16.h"
#include "util/counter_rng.h"

namespace dgemma::gpu_test {
namespace {

struct Run {
  SamplerArgs a;
  double ms = 0;
};

Run make_args(const Tensor& logits, bool gpu, float T, uint64_t key, const SampleFilter& f, int top_n, bool gaps) {
  const int64_t C = logits.dim(0);
  auto out = [&](ScalarType t, std::initializer_list<int64_t> dims) {
    return gpu ? poisoned(t, dims) : host_tensor(t, dims);
  };
  Run r;
  SamplerArgs& a = r.a;
  a.logits = gpu ? up(logits) : clone(logits);
  a.softcap = 30.0f;
  a.temperature = T;
  a.sample_key = key;
  a.entropy = out(ScalarType::kF32, {C});
  a.argmax = out(ScalarType::kI32, {C});
  a.sample = out(ScalarType::kI32, {C});
  a.argmax_logprob = out(ScalarType::kF32, {C});
  if (gaps) {
    a.argmax_gap = out(ScalarType::kF32, {C});
    a.sample_gap = out(ScalarType::kF32, {C});
  }
  a.sample_floor = out(ScalarType::kF32, {C});
  a.filter = f;
  a.top_n = top_n;
  if (top_n > 0) {
    a.top_ids = out(ScalarType::kI32, {C, top_n});
    a.top_logprobs = out(ScalarType::kF32, {C, top_n});
  }
  return r;
}

void run_on(Backend& be, Run& r) {
  be.synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  be.sampler(r.a);
  be.synchronize();
  r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Logits like run_sampler's (gpu_check_ops.cpp), with rows of ties: row 1 repeats four values, row 2
// has two saturated maxima (equal z from distinct bf16 values), row 3 has -0 and +0 as its maxima.
Tensor filter_logits(Data& d, int64_t C, int64_t V) {
  Tensor logits = d.bf16({C, V}, 2.0f);
  uint16_t* lp = logits.ptr<uint16_t>();
  for (int64_t p = 0; p < C; ++p)
    for (int j = 0; j < 5; ++j) lp[p * V + d.integer(0, V - 1)] = f32_to_bf16(d.uniform(4.0f, 12.0f));
  if (C > 3 && V >= 4) {
    const float levels[4] = {3.0f, 2.5f, 1.0f, -2.0f};
    for (int64_t v = 0; v < V; ++v) lp[V + v] = f32_to_bf16(levels[d.integer(0, 3)]);
    lp[2 * V + d.integer(0, V / 2 - 1)] = f32_to_bf16(2000.0f);
    lp[2 * V + d.integer(V / 2, V - 1)] = f32_to_bf16(3000.0f);
    for (int64_t v = 0; v < V; ++v) lp[3 * V + v] = f32_to_bf16(-std::abs(bf16_to_f32(lp[3 * V + v])) - 0.5f);
    lp[3 * V + d.integer(0, V / 2 - 1)] = f32_to_bf16(-0.0f);
    lp[3 * V + d.integer(V / 2, V - 1)] = f32_to_bf16(0.0f);
  }
  return logits;
}

void run_filter(Reporter& r, const std::string& name, int64_t C, int64_t V, float T, const SampleFilter& f,
                int top_n) {
  Data d("sample filter " + name);
  const Tensor logits = filter_logits(d, C, V);
  const uint64_t key = rng::stream_key(run_seed(), 1, 5, rng::kSample);
  Run cpu_run = make_args(logits, false, T, key, f, top_n, true);
  Run gpu_run = make_args(logits, true, T, key, f, top_n, true);
  Run plain = make_args(logits, true, T, key, SampleFilter{}, 0, true);
  Run fast = make_args(logits, true, T, key, f, top_n, false);  // the engine's path (no gaps)
  run_on(cpu(), cpu_run);
  run_on(cuda(), gpu_run);
  run_on(cuda(), plain);
  run_on(cuda(), fast);
  const SamplerArgs &c = cpu_run.a, &g = gpu_run.a, &p = plain.a;
  r.note(name + ": GPU sampler " + fmt_double(gpu_run.ms) + " ms (unfiltered " + fmt_double(plain.ms) +
         " ms, without gaps " + fmt_double(fast.ms) + " ms)");

  // The filter touches only the sample: the rest is the unfiltered GPU op's, bit for bit.
  if (f32(g.entropy) != f32(p.entropy)) r.fail(name + ": entropy differs from the unfiltered run");
  if (i32(g.argmax) != i32(p.argmax)) r.fail(name + ": argmax differs from the unfiltered run");
  if (f32(g.argmax_logprob) != f32(p.argmax_logprob)) r.fail(name + ": argmax_logprob differs from the unfiltered run");
  if (u16(g.logits) != u16(p.logits)) r.fail(name + ": self-conditioning probabilities differ from the unfiltered run");
  if (i32(fast.a.sample) != i32(g.sample)) r.fail(name + ": the screened Gumbel path picks other samples");

  // Floors: the least allowed z. z agrees to a few fp32 ulps (tanhf), so the floors do; a floor may
  // move to another bin only when the CPU's decision sits on a boundary, which random data never
  // hits at the scales checked here; report every difference above 4e-5.
  const auto fc = f32(c.sample_floor), fg = f32(g.sample_floor);
  expect_f32(r, name + " sample_floor", fg, fc, 4e-5, 0.0);
  const auto sc = i32(c.sample), sg = i32(g.sample);
  const auto gap = f32(c.sample_gap);
  int64_t near = 0;
  for (int64_t i = 0; i < C; ++i) {
    if (gap[i] > 1e-4f) {
      if (sc[i] != sg[i])
        r.fail(name + ": sample of row " + std::to_string(i) + " is " + std::to_string(sg[i]) + ", CPU " +
               std::to_string(sc[i]) + " (margin " + fmt_double(gap[i]) + ")");
    } else {
      ++near;
    }
  }
  r.note(name + ": near-tie samples exempted: " + std::to_string(near));
  if (top_n > 0) {
    const auto ic = i32(c.top_ids), ig = i32(g.top_ids);
    const auto lc = f32(c.top_logprobs), lg = f32(g.top_logprobs);
    expect_f32(r, name + " top_logprobs", lg, lc, 2e-5, 1e-6);
    for (int64_t i = 0; i < C * top_n; ++i) {
      if (ic[i] == ig[i]) continue;
      // Another order only between alternatives whose z are within the tanhf differences.
      const int64_t j = i % top_n;
      const bool near_prev = j > 0 && std::abs(lc[i] - lc[i - 1]) < 2e-5f;
      const bool near_next = j + 1 < top_n && std::abs(lc[i] - lc[i + 1]) < 2e-5f;
      if (!near_prev && !near_next)
        r.fail(name + ": alternative " + std::to_string(j) + " of row " + std::to_string(i / top_n) + " is " +
               std::to_string(ig[i]) + ", CPU " + std::to_string(ic[i]));
    }
    const auto am = i32(g.argmax);
    const auto alp = f32(g.argmax_logprob);
    for (int64_t i = 0; i < C; ++i) {
      if (ig[i * top_n] != am[i]) r.fail(name + ": the first alternative is not the argmax");
      if (lg[i * top_n] != alp[i]) r.fail(name + ": the first alternative's log-probability is not argmax_logprob");
    }
  }
}

void check_sample_filter_small(Reporter& r) {
  run_filter(r, "V1000 C6 top_k 1", 6, 1000, 0.8f, {1, 1.0, 0.0}, 0);
  run_filter(r, "V1000 C6 top_p 0.9", 6, 1000, 0.8f, {0, 0.9, 0.0}, 5);
  run_filter(r, "V100 C5 min_p 0.05", 5, 100, 1.0f, {0, 1.0, 0.05}, 20);
  run_filter(r, "V100 C5 all three", 5, 100, 0.6f, {7, 0.8, 0.01}, 3);
  run_filter(r, "V20 C4 top_k V top_n V", 4, 20, 1.0f, {20, 1.0, 0.0}, 20);
}

void check_sample_filter_vocab(Reporter& r) {
  run_filter(r, "V262144 C8 top_k 50", 8, 262144, 0.8f, {50, 1.0, 0.0}, 0);
  run_filter(r, "V262144 C8 top_p 0.95", 8, 262144, 0.8f, {0, 0.95, 0.0}, 20);
  run_filter(r, "V262144 C8 top_p 0.999 (deep)", 8, 262144, 1.0f, {0, 0.999, 0.0}, 0);
  // 70 rows: two histogram chunks (64 rows each).
  run_filter(r, "V262144 C70 all three", 70, 262144, 0.7f, {40, 0.9, 0.02}, 5);
}

}  // namespace

std::vector<Case> sample_filter_cases() {
  return {
      {"sample_filter_small", check_sample_filter_small},
      {"sample_filter_vocab262144", check_sample_filter_vocab},
  };
}

}  // namespace dgemma::gpu_test
