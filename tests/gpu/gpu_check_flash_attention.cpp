// Checks of the one-launch flash attention (backend/cuda/flash_attention.cu, attention_batch with
// cuda::set_flash_attention on) against the CPU backend (the reference: attention() per item) and
// against the CUDA backend's per-item path (cuBLAS), on fresh random inputs with poisoned outputs. The
// cases are those of the emulated unit test (tests/unit/backend/test_flash_attention_emulated.cpp) and
// the model's shapes: several items in one launch, head dims 64 to 512, bidirectional / causal /
// causal with a window, caches over several pages of a shuffled pool (table entries of the pages
// before cache_first are -1: never read), cache_first > 0, page sizes that are and are not powers of
// two, K = V, items without a cache, and forced key splits. `--bench` rows (flash_bench) time one
// layer's attention of the 26B-A4B shapes at batch 1, 4 and 16 and causal prefill chunks.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/flash_attention.cuh"
#include "backend/cuda/tuning.h"
#include "gpu_check_util.h"

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

void run_flash(Reporter& r, const FlashCase& c) {
  Data d("flash attention " + c.name);
  BatchInputs in;
  make_batch(d, c, in);
  const int64_t T = in.host.q.dim(0);
  const auto* words = reinterpret_cast<const int32_t*>(in.items.data());
  const cuda::FlashAttentionPlan plan =
      cuda::plan_flash_attention(T, c.Hq, c.Hkv, c.D, words, static_cast<int>(in.items.size()), 0);
  r.note(c.name + ": " + std::to_string(plan.tiles) + " row tiles, " + std::to_string(plan.splits) + " splits");
  if (plan.splits <= 0) r.fail(c.name + ": no flash plan (the check would test the per-item path)");

  cpu().attention_batch(in.host);
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
  const auto flash = u16(in.gpu.out), want = u16(in.host.out), unfused = u16(ua.out);

  // Against the CPU: the differences of the fused kernel's check (gpu_check_fused_attention.cpp:
  // scores summed in MMA order, a bf16 score now and then rounding to its other neighbour and moving
  // its whole row when it dominates, the softmax sum in another order) plus one: the kernel rounds each
  // probability relative to the running maximum and divides the fp32 output by the sum, where the
  // reference rounds p / sum. Both are one bf16 rounding of each probability, so the per-element bound
  // and the NMSE bound stay those of gemm_tol; fewer outputs are bit-identical.
  const double rows = static_cast<double>(T * c.Hq);
  Tol tol = gemm_tol();
  tol.max_bad_fraction = std::max(1e-3, 2.0 / rows);
  tol.min_exact = 0.6;
  expect_bf16(r, c.name + " flash vs cpu", flash, want, tol);
  Tol tol_u = tol;
  tol_u.max_bad_fraction = std::max(2e-3, 4.0 / rows);
  tol_u.min_exact = 0.5;
  expect_bf16(r, c.name + " flash vs per-item cuda", flash, unfused, tol_u);
  Tol tol_c = tol;
  tol_c.min_exact = 0.8;
  expect_bf16(r, c.name + " per-item cuda vs cpu", unfused, want, tol_c);  // control: the inputs

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
    run_flash(r, {p + "d512 K=V", 16, 2, 512, 256, true, {{256, 3000, 0, false, 0}, {1, 5, 0, false, 0}}});
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
    a.v_new = bf({T, s.Hkv, s.D}, 42, 1.0f);
    a.k_pages = bf({pages_per * s.batch, s.Hkv, P, s.D}, 43, 0.25f);
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
    for (int flash = 0; flash < 2; ++flash) {
      cuda::set_flash_attention(flash != 0);
      const uint64_t l0 = cuda::launches_so_far();
      be.attention_batch(a);
      be.synchronize();
      const uint64_t launches = cuda::launches_so_far() - l0;
      const std::string name = std::string("attn ") + s.name + " b" + std::to_string(s.batch) +
                               (flash ? " flash" : " cublas") + " (" + std::to_string(launches) + " launches)";
      row(name.c_str(), time_ms([&] { be.attention_batch(a); }));
    }
    cuda::set_fused_attention(fused_was);
    cuda::set_flash_attention(was);
  }
}

}  // namespace dgemma::gpu_test
