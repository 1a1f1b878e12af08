// Checks of the one-launch flash attention (backend/cuda/attention/flash.cu, attention_batch) against
// the CPU backend (the reference: attention() per item), against the CUDA backend's per-item path
// (cuBLAS) and, where the hopper family runs the wgmma kernel (head dims 256 / 512), against the
// portable family's mma.sync kernel, on fresh random inputs with poisoned outputs. The cases are those
// of the emulated unit test (tests/unit/backend/test_flash_attention_emulated.cpp) and the model's
// shapes: several items in one launch, head dims 64 to 512, bidirectional / causal / causal with a
// window, caches over several pages of a shuffled pool (table entries of the pages before cache_first
// are -1: never read), cache_first > 0, page sizes that are and are not powers of two, K = V, items
// without a cache, and forced key splits; each kernel in a check of its own (flash_attention_mma_sync,
// flash_attention_wgmma), the others in the run's kernel family. `--bench` rows (flash_bench) time one
// layer's attention of the 26B-A4B shapes at batch 1, 4 and 16 and causal prefill chunks, per kernel.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/attention/flash.cuh"
#include "backend/cuda/cuda_backend.h"
#include "gpu_check_util.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma::gpu_test {
namespace {

// A scope whose flash attention plans take `splits` key splits (0: planned).
CudaOptions with_splits(int splits) {
  return options_with([&](CudaOptions& o) { o.flash_splits = splits; });
}

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
  std::vector<std::vector<ImageBlock>> blocks = {};  // per item (missing: none)
  bool windowed = false;                             // the blocks obey the window too
};

const char* kernel_name(cuda::FlashKernel k) { return k == cuda::FlashKernel::kWgmma ? "wgmma" : "mma.sync"; }

// The flash plan cuda() makes for these items.
cuda::FlashAttentionPlan plan_of(int64_t T, int64_t Hq, int64_t Hkv, int64_t D, const std::vector<AttentionItem>& items) {
  const cuda::Context& ctx = cuda::context_of(cuda());
  return cuda::plan_flash_attention(T, Hq, Hkv, D, reinterpret_cast<const int32_t*>(items.data()),
                                    static_cast<int>(items.size()), ctx.hopper(), ctx.options.flash_splits, ctx.stream);
}

// One batch on the host and on the GPU. Not copyable: host_items points into `items`.
struct BatchInputs {
  std::vector<AttentionItem> items;
  std::vector<ImageBlock> blocks;
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
    if (in.items.size() < c.blocks.size() && !c.blocks[in.items.size()].empty()) {
      const auto& b = c.blocks[in.items.size()];
      a.blocks_first = static_cast<int32_t>(in.blocks.size());
      a.blocks_len = static_cast<int32_t>(b.size());
      a.blocks_windowed = c.windowed ? 1 : 0;
      in.blocks.insert(in.blocks.end(), b.begin(), b.end());
    }
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
  h.host_blocks = in.blocks;
  if (!in.blocks.empty()) {
    const auto* bw = reinterpret_cast<const int32_t*>(in.blocks.data());
    h.blocks = host_i32(std::vector<int32_t>(bw, bw + 2 * in.blocks.size()));
  }
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
  if (!h.blocks.empty()) g.blocks = up(h.blocks);
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

// want_kernel: the kernel the plan must run (any when empty).
void run_flash(Reporter& r, const FlashCase& c, std::optional<cuda::FlashKernel> want_kernel = {}) {
  Data d("flash attention " + c.name);
  BatchInputs in;
  make_batch(d, c, in);
  const int64_t T = in.host.q.dim(0);
  const cuda::FlashAttentionPlan plan = plan_of(T, c.Hq, c.Hkv, c.D, in.items);
  r.note(c.name + ": " + std::to_string(plan.tiles) + " row tiles, " + std::to_string(plan.splits) + " splits, " +
         kernel_name(plan.kernel));
  if (plan.splits <= 0) r.fail(c.name + ": no flash plan (the check would test the per-item path)");
  if (want_kernel && plan.kernel != *want_kernel)
    r.fail(c.name + ": planned the " + kernel_name(plan.kernel) + " kernel, not " + kernel_name(*want_kernel));

  cpu().attention_batch(in.host);
  AttentionBatchArgs abs_args = in.host;  // the same probabilities over |V|
  abs_args.v_new = abs_of(in.host.v_new);
  abs_args.v_pages = abs_of(in.host.v_pages);
  abs_args.out = host_tensor(ScalarType::kBF16, {T, c.Hq, c.D});
  cpu().attention_batch(abs_args);
  cuda().attention_batch(in.gpu);
  AttentionBatchArgs ua = in.gpu;  // the per-item CUDA path, its own poisoned output
  ua.out = poisoned(ScalarType::kBF16, {T, c.Hq, c.D});
  {
    const WithOptions per_item(options_with([](CudaOptions& o) { o.attention = AttentionKernel::kPerItem; }));
    cuda().attention_batch(ua);
  }
  // Where this ran the wgmma kernel, the portable family's mma.sync kernel on the same inputs.
  AttentionBatchArgs ma = in.gpu;
  const bool both = plan.kernel == cuda::FlashKernel::kWgmma;
  if (both) {
    ma.out = poisoned(ScalarType::kBF16, {T, c.Hq, c.D});
    const WithOptions portable(options_with([](CudaOptions& o) { o.family = KernelFamily::kPortable; }));
    cuda().attention_batch(ma);
  }
  const auto flash = u16(in.gpu.out), want = u16(in.host.out), unfused = u16(ua.out), A = u16(abs_args.out);

  // Against the CPU: the scores are fp32 dot products in MMA order, so a bf16 score now and then
  // rounds to its other neighbour and, when it dominates, moves its whole row (the outlier allowance:
  // two rows, at least 1e-3 of the elements, as in the fused kernel's check); the softmax sum runs in
  // another order; and the kernel rounds each probability relative to the running maximum and divides
  // the fp32 output by the sum where the reference rounds p / sum (expect_rounding_bound). The NMSE of
  // the latter is ~5 single bf16 roundings (measured 6-8e-6 in the emulated test): bound 2e-5.
  // The bit-identical fraction only guards against a systematic error (a missing rounding or a wrong
  // scale takes it near 0); the bound decides. It runs from 0.92 (short items) down to about 0.5 where a
  // 32,768-key cache is split 8 ways (each split's partial output is rounded and merged): floor 0.4.
  const double rows = static_cast<double>(T * c.Hq);
  const double outliers = std::max(1e-3, 2.0 / rows);
  const double min_exact = 0.4;
  expect_rounding_bound(r, c.name + " flash vs cpu", flash, want, A, outliers, min_exact, 2e-5);
  expect_rounding_bound(r, c.name + " flash vs per-item cuda", flash, unfused, A, 2 * outliers, min_exact,
                        2e-5);
  Tol tol_c = gemm_tol();  // control: the per-item path against the CPU (gpu_check_ops' attention bounds)
  tol_c.max_bad_fraction = outliers;
  tol_c.min_exact = 0.8;
  expect_bf16(r, c.name + " per-item cuda vs cpu", unfused, want, tol_c);
  if (both) {  // the two families' kernels: each within the bound of the reference, so of each other twice
    const auto mma = u16(ma.out);
    expect_rounding_bound(r, c.name + " mma.sync vs cpu", mma, want, A, outliers, min_exact, 2e-5);
    expect_rounding_bound(r, c.name + " wgmma vs mma.sync", flash, mma, A, 2 * outliers, min_exact, 4e-5);
  }

  // Deterministic: a second run into a fresh poisoned output is bit-identical.
  AttentionBatchArgs again = in.gpu;
  again.out = poisoned(ScalarType::kBF16, {T, c.Hq, c.D});
  cuda().attention_batch(again);
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

// The cases of one family's kernel for head dims 256 and 512 (the wgmma kernel in the hopper family,
// mma.sync in the portable one): the small cases, the model's sliding shapes (denoise at batch 4, a
// causal prompt chunk with a window next to a canvas, a long cache), items of one warpgroup's rows,
// forced splits (more than the key tiles, too), K = V; head dim 512: the model's full layers (denoise
// over caches, a causal prompt), a long cache with a window, splits, K = V and not.
void run_family_cases(Reporter& r, cuda::FlashKernel kernel) {
  const std::string k = kernel == cuda::FlashKernel::kWgmma ? "wgmma " : "mma.sync ";
  auto run = [&](FlashCase c) {
    c.name = k + c.name;
    run_flash(r, c, kernel);
  };
  // Scaling 0: every visible score 0, P uniform (exactly 1 before the division): the output is the
  // mean of the visible V rows whatever the score MMA does, so a failure here is in the P.V operand
  // layout (the transposed V descriptor), one that passes only here in the scores.
  run({"d256 uniform P (P.V alone)", 4, 2, 256, 16, false, {{7, 40, 20, false, 0}, {21, 33, 0, true, 16}}, 0.0f});
  run({"d512 uniform P (P.V alone)", 4, 1, 512, 16, false, {{6, 45, 3, false, 0}, {10, 0, 0, true, 0}}, 0.0f});
  run({"d256 P16", 4, 2, 256, 16, false, {{7, 40, 20, false, 0}, {21, 33, 0, true, 16}, {80, 20, 5, true, 30}}});
  run({"d256 P24 K=V three items", 8, 1, 256, 24, true,
       {{40, 300, 17, false, 0}, {70, 100, 0, true, 50}, {9, 0, 0, false, 0}}});
  run({"sliding denoise batch4", 16, 8, 256, 256, false,
       {{256, 1023, 0, false, 0}, {256, 1023, 300, false, 0}, {256, 500, 0, false, 0}, {256, 1023, 4000, false, 0}}});
  run({"sliding prefill 600 w1024 + canvas", 16, 8, 256, 256, false,
       {{600, 1023, 977, true, 1024}, {256, 1023, 0, false, 0}}});
  run({"sliding prefill 2048 w1024 fresh", 16, 8, 256, 256, false, {{2048, 0, 0, true, 1024}}});
  run({"scaling one item n1", 16, 8, 256, 16, false, {{1, 1, 0, false, 0}}, 0.125f, 6.0f});
  run({"d256 cache32768", 4, 2, 256, 256, false, {{5, 32768, 0, false, 0}}});
  run({"d512 P8 K=V", 4, 1, 512, 8, true, {{6, 45, 3, false, 0}, {10, 0, 0, true, 0}}});
  run({"full denoise batch2 K=V", 16, 2, 512, 256, true, {{256, 3000, 0, false, 0}, {256, 700, 0, false, 0}}});
  run({"full prefill 300 causal K=V", 16, 2, 512, 256, true, {{300, 1500, 0, true, 0}}});
  run({"d512 causal w1024 cache32768", 8, 1, 512, 256, false, {{5, 32768, 100, true, 1024}}});
  run({"d512 scaling causal w7", 4, 2, 512, 16, false, {{5, 7, 2, true, 7}, {3, 0, 0, false, 0}}, 0.0625f, 6.0f});
  for (int s : {2, 5, 32}) {
    const WithOptions splits(with_splits(s));
    run({"splits" + std::to_string(s) + " d256 sliding", 16, 8, 256, 256, false,
         {{256, 1023, 0, false, 0}, {40, 300, 10, true, 100}}});
    run({"splits" + std::to_string(s) + " d512 K=V", 16, 2, 512, 256, true, {{256, 1000, 0, false, 0}, {1, 5, 0, false, 0}}});
  }
}

// The hopper family's warpgroup-MMA kernel (attention/flash_wgmma_kernel.cuh), whatever the run's
// family; on a GPU that is not sm_90 the check says so and passes.
void check_flash_wgmma(Reporter& r) {
  std::optional<WithOptions> hopper;
  try {
    hopper.emplace(options_with([](CudaOptions& o) { o.family = KernelFamily::kHopper; }));
  } catch (const Error& e) {
    r.note(std::string("flash wgmma: not on this GPU (") + e.what() + ")");
    return;
  }
  run_family_cases(r, cuda::FlashKernel::kWgmma);
}

// The portable family's mma.sync kernel at head dims 256 and 512, whatever the run's family.
void check_flash_mma_sync(Reporter& r) {
  const WithOptions portable(options_with([](CudaOptions& o) { o.family = KernelFamily::kPortable; }));
  run_family_cases(r, cuda::FlashKernel::kMmaSync);
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
    const WithOptions splits(with_splits(s));
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
// Causal prefill items with image blocks (the image-block mask of backend/attention_keys.h): blocks seen
// whole by their tokens, past the window (the reference's generate()) and clamped to it (Gemma 4's),
// blocks crossing row and key tiles, next to a bidirectional item and over a cache.
void check_flash_image_blocks(Reporter& r) {
  const std::vector<std::vector<ImageBlock>> blocks = {{{3, 130}, {131, 200}}, {}, {{0, 12}, {20, 39}}};
  for (bool windowed : {false, true})
    for (int64_t D : {64, 128, 256, 512})
      run_flash(r, {"d" + std::to_string(D) + (windowed ? " image blocks in the window" : " image blocks"),
                    4,
                    2,
                    D,
                    16,
                    false,
                    {{210, 0, 0, true, 64}, {9, 30, 0, false, 0}, {40, 23, 0, true, 0}},
                    1.0f,
                    1.5f,
                    blocks,
                    windowed});
}

void check_flash_plan(Reporter& r) {
  const std::vector<AttentionItem> it = {{0, 5, 0, 7, 0, 1, 0, 0}};
  for (int64_t D : {32, 96, 192, 1024})
    if (plan_of(5, 4, 2, D, it).splits != 0) r.fail("flash plan: head dim " + std::to_string(D) + " has a plan");
  if (plan_of(5, 6, 4, 64, it).splits != 0) r.fail("flash plan: Hq % Hkv != 0 has a plan");
  // Denoise at batch 1: few row tiles over long caches -> several splits.
  const std::vector<AttentionItem> den = {{0, 256, 0, 1023, 0, 4, 0, 0}};
  const auto p = plan_of(256, 16, 8, 256, den);
  r.note("flash plan sliding denoise batch 1: " + std::to_string(p.tiles) + " tiles, " + std::to_string(p.splits) +
         " splits, " + std::to_string(p.workspace_bytes) + " workspace bytes");
  if (p.splits < 2) r.fail("flash plan: sliding denoise batch 1 has " + std::to_string(p.splits) + " splits");
}

}  // namespace

std::vector<Case> flash_attention_cases() {
  return {
      {"flash_attention_small", check_flash_small},
      {"flash_attention_model", check_flash_model},
      {"flash_attention_splits", check_flash_splits},
      {"flash_attention_long", check_flash_long},
      {"flash_attention_mma_sync", check_flash_mma_sync},
      {"flash_attention_wgmma", check_flash_wgmma},
      {"flash_attention_plan", check_flash_plan},
      {"flash_attention_image_blocks", check_flash_image_blocks},
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
      {"denoise sliding D=256 cache 512", 256, 8, C, 512, 1, false, 0},
      {"denoise full D=512 cache 512", 512, 2, C, 512, 1, false, 0},
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
    // Per item (cuBLAS), then flash with each family's kernel (the wgmma one: hopper, D 256 / 512).
    struct Mode {
      const char* name;
      AttentionKernel attention;
      KernelFamily family;
    };
    const Mode modes[] = {{" cublas", AttentionKernel::kPerItem, KernelFamily::kAuto},
                          {" flash mma.sync", AttentionKernel::kAuto, KernelFamily::kPortable},
                          {" flash wgmma", AttentionKernel::kAuto, KernelFamily::kHopper}};
    for (const Mode& m : modes) {
      if (m.family == KernelFamily::kHopper && s.D < 256) continue;
      std::optional<WithOptions> scope;
      try {
        scope.emplace(options_with([&](CudaOptions& o) {
          o.attention = m.attention;
          if (m.family != KernelFamily::kAuto) o.family = m.family;
        }));
      } catch (const Error&) {
        continue;  // the hopper family off sm_90
      }
      Backend& b = cuda();
      const uint64_t l0 = b.work_stats().launches;
      b.attention_batch(a);
      b.synchronize();
      const uint64_t launches = b.work_stats().launches - l0;
      const std::string name = std::string("attn ") + s.name + " b" + std::to_string(s.batch) + m.name + " (" +
                               std::to_string(launches) + " launches)";
      row(name.c_str(), time_ms([&] { b.attention_batch(a); }));
      if (m.attention != AttentionKernel::kAuto || s.batch != 1 || s.L == 0) continue;
      // The split heuristic's alternatives where the grid is small.
      const int planned = plan_of(T, Hq, s.Hkv, s.D, items).splits;
      for (int forced : {1, 2, 3, 4, 6, 8}) {
        const WithOptions splits(with_splits(forced));
        Backend& f = cuda();
        const std::string sname = std::string("attn ") + s.name + " b1" + m.name + " splits " + std::to_string(forced) +
                                  (forced == planned ? " (auto)" : "");
        row(sname.c_str(), time_ms([&] { f.attention_batch(a); }));
      }
    }
  }
}

}  // namespace dgemma::gpu_test
