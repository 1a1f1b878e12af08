// Checks of the one-launch flash attention (backend/cuda/flash_attention.cu, attention_batch with
// cuda::set_flash_attention on) against the CPU backend (the reference: attention() per item) and
// against the CUDA backend's per-item path (cuBLAS), on fresh random inputs with poisoned outputs. The
// cases are those of the emulated unit test (tests/unit/backend/test_flash_attention_emulated.cpp) and
// the model's shapes: several items in one launch, head dims 64 to 512, bidirectional / causal /
// causal with a window, caches over several pages of a shuffled pool (table entries of the pages
// before cache_first are -1: never read), cache_first > 0, page sizes that are and are not powers of
// two, K = V, items without a cache, and forced key splits; every kernel variant (variants 1 .. 3 in
// checks of their own, 3 the Hopper wgmma kernel). `--bench` rows (flash_bench) time one layer's
// attention of the 26B-A4B shapes at batch 1, 4 and 16 and causal prefill chunks, per variant.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/device_info.cuh"
#include "backend/cuda/flash_attention.cuh"
#include "backend/cuda/tuning.h"
#include "gpu_check_util.h"
#include "util/bf16.h"

namespace dgemma::gpu_test {
namespace {

class FlashKnob {
 public:
  explicit FlashKnob(bool on) : old_(cuda::set_flash_attention(on)) {}
  ~FlashKnob() { cuda::set_flash_attention(old_); }
  FlashKnob(const FlashKnob&) = delete;
  FlashKnob& operator=(const FlashKnob&) = delete;

 private:
  bool old_;
};

class FlashVariantKnob {
 public:
  explicit FlashVariantKnob(int v) : old_(cuda::set_flash_attention_variant(v)) {}
  ~FlashVariantKnob() { cuda::set_flash_attention_variant(old_); }
  FlashVariantKnob(const FlashVariantKnob&) = delete;
  FlashVariantKnob& operator=(const FlashVariantKnob&) = delete;

 private:
  int old_;
};

class FlashSplitsKnob {
 public:
  explicit FlashSplitsKnob(int splits) : old_(cuda::set_flash_attention_splits(splits)) {}
  ~FlashSplitsKnob() { cuda::set_flash_attention_splits(old_); }
  FlashSplitsKnob(const FlashSplitsKnob&) = delete;
  FlashSplitsKnob& operator=(const FlashSplitsKnob&) = delete;

 private:
  int old_;
};

struct FlashItem {
  int64_t n, L, first;
  bool causal;
  int64_t window;
};

struct FlashCase {
  std::string name;
  int64_t Hq, Hkv, D, P;
  bool k_eq_v;
  std::vector<FlashItem> items;
  float scaling = 1.0f;
  float score_std = 1.5f;
  int want_variant = -1;  // >= 0: the plan must run this kernel variant
};

// One batch on the host and on the GPU. Not copyable: host_items points into `items`.
struct BatchInputs {
  std::vector<AttentionItem> items;
  AttentionBatchArgs host, gpu;
  BatchInputs() = default;
  BatchInputs(const BatchInputs&) = delete;
  BatchInputs& operator=(const BatchInputs&) = delete;
};

// Pages of P tokens for every item's positions [0, first + L) in one shuffled pool with spare pages;
// the table entries of pages wholly before `first` are -1.
void make_batch(Data& d, const FlashCase& c, BatchInputs& in) {
  const float s = std::sqrt(c.score_std / std::sqrt(static_cast<float>(c.D)));
  int64_t T = 0, pages = 0;
  for (const FlashItem& it : c.items) {
    T += it.n;
    pages += (it.first + it.L + c.P - 1) / c.P;
  }
  pages += 3;
  std::vector<int32_t> perm(static_cast<size_t>(pages));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), d.engine());
  std::vector<int32_t> tables;
  int64_t q0 = 0;
  size_t next = 0;
  for (const FlashItem& it : c.items) {
    AttentionItem a;
    a.q_first = static_cast<int32_t>(q0);
    a.q_len = static_cast<int32_t>(it.n);
    a.cache_first = static_cast<int32_t>(it.first);
    a.cache_len = static_cast<int32_t>(it.L);
    a.table_first = static_cast<int32_t>(tables.size());
    const int64_t np = (it.first + it.L + c.P - 1) / c.P;
    a.table_len = static_cast<int32_t>(np);
    for (int64_t pg = 0; pg < np; ++pg) tables.push_back((pg + 1) * c.P <= it.first ? -1 : perm[next++]);
    a.causal = it.causal ? 1 : 0;
    a.window = static_cast<int32_t>(it.window);
    in.items.push_back(a);
    q0 += it.n;
  }
  if (tables.empty()) tables.push_back(-1);
  AttentionBatchArgs& h = in.host;
  h.q = d.bf16({T, c.Hq, c.D}, s);
  h.k_new = d.bf16({T, c.Hkv, c.D}, s);
  h.v_new = c.k_eq_v ? h.k_new : d.bf16({T, c.Hkv, c.D}, 1.0f);
  h.k_pages = d.bf16({pages, c.Hkv, c.P, c.D}, s);
  h.v_pages = c.k_eq_v ? h.k_pages : d.bf16({pages, c.Hkv, c.P, c.D}, 1.0f);
  h.page_tables = host_i32(tables);
  const auto* words = reinterpret_cast<const int32_t*>(in.items.data());
  h.items = host_i32(std::vector<int32_t>(words, words + in.items.size() * kAttentionItemFields));
  h.host_items = in.items;
  h.scaling = c.scaling;
  h.out = host_tensor(ScalarType::kBF16, {T, c.Hq, c.D});
  AttentionBatchArgs& g = in.gpu;
  g = h;
  g.q = up(h.q);
  g.k_new = up(h.k_new);
  g.v_new = c.k_eq_v ? g.k_new : up(h.v_new);
  g.k_pages = up(h.k_pages);
  g.v_pages = c.k_eq_v ? g.k_pages : up(h.v_pages);
  g.page_tables = up(h.page_tables);
  g.items = up(h.items);
  g.out = poisoned(ScalarType::kBF16, {T, c.Hq, c.D});
}

// |x| of a host bf16 tensor (a new tensor).
Tensor abs_of(const Tensor& x) {
  Tensor y = clone(x);
  uint16_t* p = y.ptr<uint16_t>();
  for (int64_t i = 0; i < y.numel(); ++i) p[i] &= 0x7fff;
  return y;
}

// got against want element by element with the probability-rounding bound: |got - want| <=
// 1.25 * 2^-8 * A + 1.5 bf16 steps of want, A = sum_j P_j |v_j| (the reference over |V|). Each side
// rounds every probability once to bf16 (at most 2^-9 of itself), each side's output once. Up to
// `max_bad_fraction` of the elements may exceed it (rows whose dominant score rounded the other way:
// fp32 dot products in another order), and the NMSE must stay below max_nmse.
void expect_rounding_bound(Reporter& r, const std::string& what, const std::vector<uint16_t>& got,
                           const std::vector<uint16_t>& want, const std::vector<uint16_t>& abs_ref,
                           double max_bad_fraction, double min_exact, double max_nmse) {
  size_t exact = 0, bad = 0, unwritten = 0;
  double err2 = 0, ref2 = 0, worst = 0;
  for (size_t e = 0; e < got.size(); ++e) {
    const double g = bf16_to_f32(got[e]), w = bf16_to_f32(want[e]), A = bf16_to_f32(abs_ref[e]);
    if (!std::isfinite(g)) {
      ++unwritten;
      continue;
    }
    err2 += (g - w) * (g - w);
    ref2 += w * w;
    exact += got[e] == want[e];
    const double step = std::ldexp(1.0, std::ilogb(std::max(std::abs(w), 1e-30)) - 7);
    const double bound = 1.25 * std::ldexp(A, -8) + 1.5 * step;
    worst = std::max(worst, std::abs(g - w) / bound);
    bad += std::abs(g - w) > bound;
  }
  const double n = static_cast<double>(std::max<size_t>(got.size(), 1));
  const double nmse = err2 / std::max(ref2, 1e-30);
  r.note(what + ": n=" + std::to_string(got.size()) + " exact=" + fmt_double(exact / n) + " beyond_bound=" +
         std::to_string(bad) + " worst/bound=" + fmt_double(worst) + " nmse=" + fmt_double(nmse));
  if (unwritten > 0) r.fail(what + ": " + std::to_string(unwritten) + " elements not finite (unwritten?)");
  if (bad / n > max_bad_fraction)
    r.fail(what + ": " + std::to_string(bad) + " elements beyond the rounding bound (allowed fraction " +
           fmt_double(max_bad_fraction) + ")");
  if (exact / n < min_exact) r.fail(what + ": bit-identical fraction " + fmt_double(exact / n) + " < " + fmt_double(min_exact));
  if (nmse > max_nmse) r.fail(what + ": nmse " + fmt_double(nmse) + " > " + fmt_double(max_nmse));
}

void run_flash(Reporter& r, const FlashCase& c) {
  Data d("flash attention " + c.name);
  BatchInputs in;
  make_batch(d, c, in);
  const int64_t T = in.host.q.dim(0);
  const auto* words = reinterpret_cast<const int32_t*>(in.items.data());
  const cuda::FlashAttentionPlan plan =
      cuda::plan_flash_attention(T, c.Hq, c.Hkv, c.D, words, static_cast<int>(in.items.size()), 0);
  r.note(c.name + ": " + std::to_string(plan.tiles) + " row tiles, " + std::to_string(plan.splits) + " splits, variant " +
         std::to_string(plan.variant));
  if (plan.splits <= 0) r.fail(c.name + ": no flash plan (the check would test the per-item path)");
  if (c.want_variant >= 0 && plan.variant != c.want_variant)
    r.fail(c.name + ": planned variant " + std::to_string(plan.variant) + ", not " + std::to_string(c.want_variant));

  cpu().attention_batch(in.host);
  AttentionBatchArgs abs_args = in.host;  // the same probabilities over |V|
  abs_args.v_new = abs_of(in.host.v_new);
  abs_args.v_pages = abs_of(in.host.v_pages);
  abs_args.out = host_tensor(ScalarType::kBF16, {T, c.Hq, c.D});
  cpu().attention_batch(abs_args);
  {
    FlashKnob knob(true);
    cuda().attention_batch(in.gpu);
  }
  AttentionBatchArgs ua = in.gpu;  // the per-item CUDA path, its own poisoned output
  ua.out = poisoned(ScalarType::kBF16, {T, c.Hq, c.D});
  {
    FlashKnob knob(false);
    cuda().attention_batch(ua);
  }
  const auto flash = u16(in.gpu.out), want = u16(in.host.out), unfused = u16(ua.out), A = u16(abs_args.out);

  // Against the CPU: the scores are fp32 dot products in MMA order, so a bf16 score now and then
  // rounds to its other neighbour and, when it dominates, moves its whole row (the outlier allowance:
  // two rows, at least 1e-3 of the elements, as in the fused kernel's check); the softmax sum runs in
  // another order; and the kernel rounds each probability relative to the running maximum and divides
  // the fp32 output by the sum where the reference rounds p / sum (expect_rounding_bound). The NMSE of
  // the latter is ~5 single bf16 roundings (measured 6-8e-6 in the emulated test): bound 2e-5.
  const double rows = static_cast<double>(T * c.Hq);
  const double outliers = std::max(1e-3, 2.0 / rows);
  expect_rounding_bound(r, c.name + " flash vs cpu", flash, want, A, outliers, 0.5, 2e-5);
  expect_rounding_bound(r, c.name + " flash vs per-item cuda", flash, unfused, A, 2 * outliers, 0.5, 2e-5);
  Tol tol_c = gemm_tol();  // control: the per-item path against the CPU (gpu_check_ops' attention bounds)
  tol_c.max_bad_fraction = outliers;
  tol_c.min_exact = 0.8;
  expect_bf16(r, c.name + " per-item cuda vs cpu", unfused, want, tol_c);

  // Deterministic: a second run into a fresh poisoned output is bit-identical.
  AttentionBatchArgs again = in.gpu;
  again.out = poisoned(ScalarType::kBF16, {T, c.Hq, c.D});
  {
    FlashKnob knob(true);
    cuda().attention_batch(again);
  }
  expect_bf16(r, c.name + " flash rerun", u16(again.out), flash, exact_tol());
}

// name, Hq, Hkv, D, P, K=V, items {n, L, first, causal, window} [, scaling, score_std]
void check_flash_small(Reporter& r) {
  run_flash(r, {"d64 P16 three items", 4, 2, 64, 16, false,
                {{20, 37, 5, false, 0}, {33, 0, 0, true, 0}, {17, 50, 40, true, 24}}});
  run_flash(r, {"d128 P12 g8", 8, 1, 128, 12, false, {{9, 70, 0, false, 0}, {12, 19, 100, true, 0}}});
  run_flash(r, {"d256 P16", 4, 2, 256, 16, false, {{7, 40, 20, false, 0}, {21, 33, 0, true, 16}}});
  run_flash(r, {"d512 P8 K=V", 4, 1, 512, 8, true, {{6, 45, 3, false, 0}, {10, 0, 0, true, 0}}});
  run_flash(r, {"d64 scaling one item n1", 8, 1, 64, 16, false, {{1, 1, 0, false, 0}}, 0.125f, 6.0f});
  run_flash(r, {"d512 scaling causal w7", 4, 2, 512, 16, false, {{5, 7, 2, true, 7}, {3, 0, 0, false, 0}}, 0.0625f,
                6.0f});
}

// Kernel variant 1 (set_flash_attention_variant): head dim 512 with the output halves in CTAs of
// their own (the scores recomputed by each), head dim 256 with 8 warps splitting the head dim.
void check_flash_variant1(Reporter& r) {
  FlashVariantKnob knob(1);
  run_flash(r, {"v1 d256 P16", 4, 2, 256, 16, false, {{7, 40, 20, false, 0}, {21, 33, 0, true, 16}}});
  run_flash(r, {"v1 sliding denoise batch4", 16, 8, 256, 256, false,
                {{256, 1023, 0, false, 0}, {256, 1023, 300, false, 0}, {256, 500, 0, false, 0},
                 {256, 1023, 4000, false, 0}}});
  run_flash(r, {"v1 sliding prefill 600 w1024 + canvas", 16, 8, 256, 256, false,
                {{600, 1023, 977, true, 1024}, {256, 1023, 0, false, 0}}});
  run_flash(r, {"halves d512 P8 K=V", 4, 1, 512, 8, true, {{6, 45, 3, false, 0}, {10, 0, 0, true, 0}}});
  run_flash(r, {"halves full denoise batch2 K=V", 16, 2, 512, 256, true, {{256, 1000, 0, false, 0}, {256, 700, 0, false, 0}}});
  FlashSplitsKnob splits(3);
  run_flash(r, {"halves splits3 full prefill 300 causal", 16, 2, 512, 256, true, {{300, 1500, 0, true, 0}}});
  run_flash(r, {"v1 splits3 d256 sliding", 16, 8, 256, 256, false, {{256, 1023, 0, false, 0}, {40, 300, 10, true, 100}}});
}

// Variant 2: head dim 256 with 8 warps over 128 query rows a CTA.
void check_flash_variant2(Reporter& r) {
  FlashVariantKnob knob(2);
  run_flash(r, {"v2 d256 P16", 4, 2, 256, 16, false, {{7, 40, 20, false, 0}, {21, 33, 0, true, 16}, {80, 20, 5, true, 30}}});
  run_flash(r, {"v2 sliding denoise batch4", 16, 8, 256, 256, false,
                {{256, 1023, 0, false, 0}, {256, 1023, 300, false, 0}, {256, 500, 0, false, 0},
                 {256, 1023, 4000, false, 0}}});
  run_flash(r, {"v2 sliding prefill 600 w1024 + canvas", 16, 8, 256, 256, false,
                {{600, 1023, 977, true, 1024}, {256, 1023, 0, false, 0}}});
  FlashSplitsKnob splits(3);
  run_flash(r, {"v2 splits3 d256 sliding", 16, 8, 256, 256, false, {{256, 1023, 0, false, 0}, {40, 300, 10, true, 100}}});
}

// Variant 3: the Hopper warpgroup-MMA kernel (flash_attention_wgmma_kernel.cuh; on a GPU without it
// the plan runs variant 0 and the check says so). Head dim 256: the small cases, the model's sliding
// shapes (denoise at batch 4, a causal prompt chunk with a window next to a canvas, a long cache),
// items of one warpgroup's rows, forced splits (more than the key tiles, too), K = V. Head dim 512
// (the consumers split the head dim): the model's full layers (denoise over caches, a causal prompt),
// a long cache with a window, splits, K = V and not.
void check_flash_variant3(Reporter& r) {
  FlashVariantKnob knob(3);
  const int want = cuda::current_device_has_wgmma() ? 3 : 0;
  if (want != 3) r.note("flash variant 3: this GPU has no wgmma; the plans run variant 0");
  auto run = [&](FlashCase c) {
    c.want_variant = want;
    run_flash(r, c);
  };
  // Scaling 0: every visible score 0, P uniform (exactly 1 before the division): the output is the
  // mean of the visible V rows whatever the score MMA does, so a failure here is in the P.V operand
  // layout (the transposed V descriptor), one that passes only here in the scores.
  run({"v3 d256 uniform P (P.V alone)", 4, 2, 256, 16, false, {{7, 40, 20, false, 0}, {21, 33, 0, true, 16}}, 0.0f});
  run({"v3 d512 uniform P (P.V alone)", 4, 1, 512, 16, false, {{6, 45, 3, false, 0}, {10, 0, 0, true, 0}}, 0.0f});
  run({"v3 d256 P16", 4, 2, 256, 16, false, {{7, 40, 20, false, 0}, {21, 33, 0, true, 16}, {80, 20, 5, true, 30}}});
  run({"v3 d256 P24 K=V three items", 8, 1, 256, 24, true,
       {{40, 300, 17, false, 0}, {70, 100, 0, true, 50}, {9, 0, 0, false, 0}}});
  run({"v3 sliding denoise batch4", 16, 8, 256, 256, false,
       {{256, 1023, 0, false, 0}, {256, 1023, 300, false, 0}, {256, 500, 0, false, 0}, {256, 1023, 4000, false, 0}}});
  run({"v3 sliding prefill 600 w1024 + canvas", 16, 8, 256, 256, false,
       {{600, 1023, 977, true, 1024}, {256, 1023, 0, false, 0}}});
  run({"v3 sliding prefill 2048 w1024 fresh", 16, 8, 256, 256, false, {{2048, 0, 0, true, 1024}}});
  run({"v3 scaling one item n1", 16, 8, 256, 16, false, {{1, 1, 0, false, 0}}, 0.125f, 6.0f});
  run({"v3 d256 cache32768", 4, 2, 256, 256, false, {{5, 32768, 0, false, 0}}});
  run({"v3 d512 P8 K=V", 4, 1, 512, 8, true, {{6, 45, 3, false, 0}, {10, 0, 0, true, 0}}});
  run({"v3 full denoise batch2 K=V", 16, 2, 512, 256, true, {{256, 3000, 0, false, 0}, {256, 700, 0, false, 0}}});
  run({"v3 full prefill 300 causal K=V", 16, 2, 512, 256, true, {{300, 1500, 0, true, 0}}});
  run({"v3 d512 causal w1024 cache32768", 8, 1, 512, 256, false, {{5, 32768, 100, true, 1024}}});
  run({"v3 d512 scaling causal w7", 4, 2, 512, 16, false, {{5, 7, 2, true, 7}, {3, 0, 0, false, 0}}, 0.0625f, 6.0f});
  for (int s : {2, 5, 32}) {
    FlashSplitsKnob splits(s);
    run({"v3 splits" + std::to_string(s) + " d256 sliding", 16, 8, 256, 256, false,
         {{256, 1023, 0, false, 0}, {40, 300, 10, true, 100}}});
    run({"v3 splits" + std::to_string(s) + " d512 K=V", 16, 2, 512, 256, true, {{256, 1000, 0, false, 0}, {1, 5, 0, false, 0}}});
  }
}

// Variant 4: variant 3 on key tiles of 80 for head dim 256 (head dim 512 plans variant 3).
void check_flash_variant4(Reporter& r) {
  FlashVariantKnob knob(4);
  const bool wgmma = cuda::current_device_has_wgmma();
  auto run = [&](FlashCase c, int want) {
    c.want_variant = wgmma ? want : 0;
    run_flash(r, c);
  };
  run({"v4 d256 uniform P (P.V alone)", 4, 2, 256, 16, false, {{7, 40, 20, false, 0}, {21, 33, 0, true, 16}}, 0.0f}, 4);
  run({"v4 d256 P16", 4, 2, 256, 16, false, {{7, 40, 20, false, 0}, {21, 33, 0, true, 16}, {80, 20, 5, true, 30}}}, 4);
  run({"v4 sliding denoise batch4", 16, 8, 256, 256, false,
       {{256, 1023, 0, false, 0}, {256, 1023, 300, false, 0}, {256, 500, 0, false, 0}, {256, 1023, 4000, false, 0}}},
      4);
  run({"v4 sliding prefill 600 w1024 + canvas", 16, 8, 256, 256, false,
       {{600, 1023, 977, true, 1024}, {256, 1023, 0, false, 0}}},
      4);
  run({"v4 d256 cache32768", 4, 2, 256, 256, false, {{5, 32768, 0, false, 0}}}, 4);
  FlashSplitsKnob splits(5);
  run({"v4 splits5 d256 sliding", 16, 8, 256, 256, false, {{256, 1023, 0, false, 0}, {40, 300, 10, true, 100}}}, 4);
  run({"v4 knob d512 (variant 3)", 16, 2, 512, 256, false, {{256, 1000, 0, false, 0}}}, 3);
}

// The model's shapes: 26B-A4B sliding (D 256, 16 / 8 heads, window 1024: a canvas sees 1023 cached
// keys) and full layers (D 512, 16 / 2 heads, K = V), page size 256, a prompt chunk next to canvases.
void check_flash_model(Reporter& r) {
  run_flash(r, {"sliding denoise batch4", 16, 8, 256, 256, false,
                {{256, 1023, 0, false, 0}, {256, 1023, 300, false, 0}, {256, 500, 0, false, 0},
                 {256, 1023, 4000, false, 0}}});
  run_flash(r, {"full denoise batch2 K=V", 16, 2, 512, 256, true, {{256, 3000, 0, false, 0}, {256, 700, 0, false, 0}}});
  run_flash(r, {"sliding prefill 600 w1024 + canvas", 16, 8, 256, 256, false,
                {{600, 1023, 977, true, 1024}, {256, 1023, 0, false, 0}}});
  run_flash(r, {"full prefill 300 causal", 16, 2, 512, 256, true, {{300, 1500, 0, true, 0}}});
}

// Forced key splits: more splits than key tiles (empty splits), splits of causal windows, two.
void check_flash_splits(Reporter& r) {
  for (int s : {2, 5, 32}) {
    FlashSplitsKnob knob(s);
    const std::string p = "splits" + std::to_string(s) + " ";
    run_flash(r, {p + "d64 P16", 4, 2, 64, 16, false, {{20, 37, 5, false, 0}, {33, 0, 0, true, 0}, {17, 50, 40, true, 24}}});
    run_flash(r, {p + "d256 sliding", 16, 8, 256, 256, false, {{256, 1023, 0, false, 0}, {40, 300, 10, true, 100}}});
    run_flash(r, {p + "d512 K=V", 16, 2, 512, 256, true, {{256, 1000, 0, false, 0}, {1, 5, 0, false, 0}}});
  }
}

// A long cache: 32768 keys walked in tiles (and split).
void check_flash_long(Reporter& r) {
  run_flash(r, {"d256 cache32768", 4, 2, 256, 256, false, {{5, 32768, 0, false, 0}}});
  run_flash(r, {"d512 causal w1024 cache32768", 8, 1, 512, 256, false, {{5, 32768, 100, true, 1024}}});
}

// Unsupported shapes get no plan (the backend then runs the per-item path).
void check_flash_plan(Reporter& r) {
  const AttentionItem it{0, 5, 0, 7, 0, 1, 0, 0};
  const auto* w = reinterpret_cast<const int32_t*>(&it);
  for (int64_t D : {32, 96, 192, 1024})
    if (cuda::plan_flash_attention(5, 4, 2, D, w, 1, 0).splits != 0)
      r.fail("flash plan: head dim " + std::to_string(D) + " has a plan");
  if (cuda::plan_flash_attention(5, 6, 4, 64, w, 1, 0).splits != 0) r.fail("flash plan: Hq % Hkv != 0 has a plan");
  // Denoise at batch 1: few row tiles over long caches -> several splits.
  const AttentionItem den{0, 256, 0, 1023, 0, 4, 0, 0};
  const auto p = cuda::plan_flash_attention(256, 16, 8, 256, reinterpret_cast<const int32_t*>(&den), 1, 0);
  r.note("flash plan sliding denoise batch 1: " + std::to_string(p.tiles) + " tiles, " + std::to_string(p.splits) +
         " splits, " + std::to_string(p.workspace_bytes) + " workspace bytes");
  if (p.splits < 2) r.fail("flash plan: sliding denoise batch 1 has " + std::to_string(p.splits) + " splits");
}

}  // namespace

std::vector<Case> flash_attention_cases() {
  return {
      {"flash_attention_small", check_flash_small}, {"flash_attention_model", check_flash_model},
      {"flash_attention_splits", check_flash_splits}, {"flash_attention_long", check_flash_long},
      {"flash_attention_variant1", check_flash_variant1}, {"flash_attention_variant2", check_flash_variant2},
      {"flash_attention_variant3", check_flash_variant3}, {"flash_attention_variant4", check_flash_variant4},
      {"flash_attention_plan", check_flash_plan},
  };
}

// One layer's attention for all items of a step: flash (one launch) against the per-item cuBLAS path.
void flash_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                 const std::function<void(const char*, double)>& row) {
  Backend& be = cuda();
  const int64_t C = 256, Hq = 16, P = 256;
  auto bf = [&](std::initializer_list<int64_t> dims, uint64_t seed, float std) {
    Tensor t = be.alloc(ScalarType::kBF16, dims);
    be.fill_normal(t, seed, 0.0f, std);
    return t;
  };
  struct Shape {
    const char* name;
    int64_t D, Hkv, n, L, batch;
    bool causal;
    int64_t window;
  };
  const Shape shapes[] = {
      {"denoise sliding D=256 cache 1023", 256, 8, C, 1023, 1, false, 0},
      {"denoise sliding D=256 cache 1023", 256, 8, C, 1023, 4, false, 0},
      {"denoise sliding D=256 cache 1023", 256, 8, C, 1023, 16, false, 0},
      {"denoise full D=512 cache 4096", 512, 2, C, 4096, 1, false, 0},
      {"denoise full D=512 cache 4096", 512, 2, C, 4096, 4, false, 0},
      {"denoise full D=512 cache 4096", 512, 2, C, 4096, 16, false, 0},
      {"prefill 512 causal w1024 D=256", 256, 8, 512, 0, 1, true, 1024},
      {"prefill 4096 causal w1024 D=256", 256, 8, 4096, 0, 1, true, 1024},
      {"prefill 4096 causal D=512", 512, 2, 4096, 0, 1, true, 0},
  };
  for (const Shape& s : shapes) {
    const int64_t T = s.n * s.batch, pages_per = std::max<int64_t>((s.L + P - 1) / P, 1);
    AttentionBatchArgs a;
    a.q = bf({T, Hq, s.D}, 40, 0.25f);
    a.k_new = bf({T, s.Hkv, s.D}, 41, 0.25f);
    a.k_pages = bf({pages_per * s.batch, s.Hkv, P, s.D}, 43, 0.25f);
    a.v_new = bf({T, s.Hkv, s.D}, 42, 1.0f);
    a.v_pages = bf({pages_per * s.batch, s.Hkv, P, s.D}, 44, 1.0f);
    std::vector<int32_t> table;
    std::vector<AttentionItem> items;
    for (int64_t b = 0; b < s.batch; ++b) {
      AttentionItem it;
      it.q_first = static_cast<int32_t>(b * s.n);
      it.q_len = static_cast<int32_t>(s.n);
      it.cache_len = static_cast<int32_t>(s.L);
      it.table_first = static_cast<int32_t>(table.size());
      it.table_len = static_cast<int32_t>(pages_per);
      it.causal = s.causal ? 1 : 0;
      it.window = static_cast<int32_t>(s.window);
      for (int64_t pg = 0; pg < pages_per; ++pg) table.push_back(static_cast<int32_t>(b * pages_per + pg));
      items.push_back(it);
    }
    a.page_tables = up(host_i32(table));
    const auto* words = reinterpret_cast<const int32_t*>(items.data());
    a.items = up(host_i32(std::vector<int32_t>(words, words + items.size() * kAttentionItemFields)));
    a.host_items = items;
    a.out = be.alloc(ScalarType::kBF16, {T, Hq, s.D});
    const bool was = cuda::set_flash_attention(false);
    const bool fused_was = cuda::set_fused_attention(false);
    // 0: cuBLAS per item; 1: flash; 2: flash variant 1 (D 256: 8 warps splitting the head dim; D 512:
    // output halves in CTAs of their own); 3 (D 256): variant 2 (8 warps over 128 query rows); 4:
    // variant 3 (the wgmma kernel, sm_90); 5 (D 256): variant 4 (the wgmma kernel on 80-key tiles).
    for (int mode = 0; mode < 6; ++mode) {
      if ((mode == 3 || mode == 5) && s.D != 256) continue;
      cuda::set_flash_attention(mode != 0);
      const int variant_was = cuda::set_flash_attention_variant(mode >= 2 ? mode - 1 : 0);
      const uint64_t l0 = cuda::launches_so_far();
      be.attention_batch(a);
      be.synchronize();
      const uint64_t launches = cuda::launches_so_far() - l0;
      const char* what = mode == 0   ? " cublas"
                         : mode == 1 ? " flash"
                         : mode == 2 ? " flash-v1"
                         : mode == 3 ? " flash-v2"
                         : mode == 4 ? " flash-v3"
                                     : " flash-v4";
      const std::string name = std::string("attn ") + s.name + " b" + std::to_string(s.batch) + what + " (" +
                               std::to_string(launches) + " launches)";
      row(name.c_str(), time_ms([&] { be.attention_batch(a); }));
      cuda::set_flash_attention_variant(variant_was);
    }
    if (s.batch == 1 && s.L > 0) {  // the split heuristic's alternatives where the grid is small
      cuda::set_flash_attention(true);
      const auto* w = reinterpret_cast<const int32_t*>(items.data());
      for (int variant = 0; variant < 5; ++variant) {
        if ((variant == 2 || variant == 4) && s.D != 256) continue;
        const int variant_was = cuda::set_flash_attention_variant(variant);
        const auto plan = cuda::plan_flash_attention(T, Hq, s.Hkv, s.D, w, static_cast<int>(items.size()), 0);
        for (int forced : {1, 2, 4, 8}) {
          const int old = cuda::set_flash_attention_splits(forced);
          const std::string name = std::string("attn ") + s.name + " b1 flash" +
                                   (variant ? "-v" + std::to_string(variant) : std::string()) +
                                   " splits " + std::to_string(forced) + (forced == plan.splits ? " (auto)" : "");
          row(name.c_str(), time_ms([&] { be.attention_batch(a); }));
          cuda::set_flash_attention_splits(old);
        }
        cuda::set_flash_attention_variant(variant_was);
      }
    }
    cuda::set_fused_attention(fused_was);
    cuda::set_flash_attention(was);
  }
}

}  // namespace dgemma::gpu_test
