// Checks of the fused attention kernel (backend/cuda/fused_attention.cu) against the CPU backend and
// against the unfused cuBLAS path of the CUDA backend (cuda::set_fused_attention toggles the two), on
// fresh random inputs with poisoned outputs. The cases cover the head dims the kernel supports
// (64/128/256/512), empty / tiny / long caches with cap > cache_len, query counts that are not
// multiples of the kernel's row and key tiles, the three masks (bidirectional, causal, causal with a
// window shorter than the cache) and GQA group sizes 1, 2 and 8. The kernel cuts each row block's key
// range into splits (CTAs of their own, combined in a fixed order); the automatic choice gives several
// splits to most cases here, and fused_attention_splits forces counts that leave splits partly or
// fully masked (causal windows, short caches, more splits than key tiles). fused_attention_plan checks
// that the model's real shapes take the fused path, with several splits.
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/fused_attention.cuh"
#include "backend/cuda/tuning.h"
#include "gpu_check_util.h"

namespace dgemma::gpu_test {
namespace {


// Restores the fused-attention knob on every exit.
class FusedKnob {
 public:
  explicit FusedKnob(bool on) : old_(cuda::set_fused_attention(on)) {}
  ~FusedKnob() { cuda::set_fused_attention(old_); }
  FusedKnob(const FusedKnob&) = delete;
  FusedKnob& operator=(const FusedKnob&) = delete;

 private:
  bool old_;
};

// Forces the kernel's number of key splits (0: automatic) and restores the setting on every exit.
class SplitsKnob {
 public:
  explicit SplitsKnob(int splits) : old_(cuda::set_fused_attention_splits(splits)) {}
  ~SplitsKnob() { cuda::set_fused_attention_splits(old_); }
  SplitsKnob(const SplitsKnob&) = delete;
  SplitsKnob& operator=(const SplitsKnob&) = delete;

 private:
  int old_;
};

void run_fused(Reporter& r, const AttnCase& c) {
  Data d("fused attention " + c.name);
  const AttnInputs in = make_attention_inputs(d, c);
  const AttentionArgs& ca = in.host;
  const AttentionArgs& ga = in.gpu;
  AttentionArgs ua = ga;  // the unfused CUDA path, its own poisoned output
  ua.out = poisoned(ScalarType::kBF16, {c.n, c.Hq, c.D});
  cpu().attention(ca);
  {
    FusedKnob knob(true);
    cuda().attention(ga);
  }
  {
    FusedKnob knob(false);
    cuda().attention(ua);
  }
  const auto fused = u16(ga.out);

  // Against the CPU: the scores are fp32 dot products summed in another order (tensor-core MMA
  // fragments over D), so a bf16 score rounds to the other neighbour in ~1e-4 of the cases (as for any
  // GEMM, see gemm_tol) and moves that key's probability by ~exp(one bf16 step of the score); the
  // softmax sum runs in another order with online rescaling (a probability moves by one bf16 step now
  // and then); P.V accumulates in fp32 in MMA order. These are exactly the differences of the cuBLAS
  // path, so the bounds are those of run_attention (gpu_check_ops.cpp): GEMM bounds per element, up to
  // 1e-3 of the outputs further off (rows whose dominant score flipped), >= 80% bit-identical, and
  // the NMSE bound (~40x one bf16 rounding).
  // A flipped score of a dominant key (bf16 step 0.03 at |s| ~ 5) moves its probability by ~3% and
  // with it every element of that output row, so the outlier allowance is at least two whole rows:
  // with few rows (n = 5, 8 query heads: 80 rows) one such row is 1.25% of the elements (measured on
  // the H200: 59 of 20,480 elements, on the cuBLAS path alike).
  const double rows = static_cast<double>(c.n * c.Hq);
  Tol tol = gemm_tol();
  tol.max_bad_fraction = std::max(1e-3, 2.0 / rows);
  tol.min_exact = 0.8;
  expect_bf16(r, c.name + " fused vs cpu", fused, u16(ca.out), tol);
  // Against the unfused CUDA path: both sides differ from the CPU in the ways above (cuBLAS splits the
  // dot products and P.V in its own order), and from each other by at most the sum of the two; the
  // same per-element bound holds (a flip on one side is one GEMM rounding, as against the CPU), with
  // twice the outlier fraction and the NMSE bound unchanged (each side's error is ~1/40 of it).
  Tol tol_u = tol;
  tol_u.max_bad_fraction = std::max(2e-3, 4.0 / rows);
  tol_u.min_exact = 0.7;
  expect_bf16(r, c.name + " fused vs unfused", fused, u16(ua.out), tol_u);
  // The unfused path against the CPU, as a control: if this fails too, the inputs are at fault.
  expect_bf16(r, c.name + " unfused vs cpu", u16(ua.out), u16(ca.out), tol);

  // The fused kernel is deterministic: a second run (into a fresh poisoned output) is bit-identical.
  AttentionArgs ga2 = ga;
  ga2.out = poisoned(ScalarType::kBF16, {c.n, c.Hq, c.D});
  {
    FusedKnob knob(true);
    cuda().attention(ga2);
  }
  expect_bf16(r, c.name + " fused rerun", u16(ga2.out), fused, exact_tol());
}

// name, n, Hq, Hkv, D, L, cap, causal, window [, scaling, score_std]
void check_fused_d64(Reporter& r) {
  run_fused(r, {"d64 bidir n5 cache7 g1", 5, 8, 8, 64, 7, 12, false, 0});
  run_fused(r, {"d64 causal n300 nocache g2", 300, 4, 2, 64, 0, 0, true, 0});
  run_fused(r, {"d64 causal w300 n256 cache1023 g1", 256, 4, 4, 64, 1023, 1100, true, 300});
  run_fused(r, {"d64 scaling causal n5 cache1 g8", 5, 8, 1, 64, 1, 4, true, 0, 0.125f, 6.0f});
}

void check_fused_d128(Reporter& r) {
  run_fused(r, {"d128 causal w64 n256 cache1023 g8", 256, 16, 2, 128, 1023, 1100, true, 64});
  run_fused(r, {"d128 bidir n1 cache1 g8", 1, 8, 1, 128, 1, 1, false, 0});
  run_fused(r, {"d128 bidir n300 cache7 g2", 300, 4, 2, 128, 7, 7, false, 0});
}

void check_fused_d256(Reporter& r) {
  // The 26B model's sliding layers: 256 new tokens over a 1023-key cache, window 1024 (all visible
  // except the future).
  run_fused(r, {"d256 sliding causal w1024 n256 cache1023 g2", 256, 16, 8, 256, 1023, 1280, true, 1024});
  run_fused(r, {"d256 causal w100 n300 cache3000 g2", 300, 16, 8, 256, 3000, 3100, true, 100});
  run_fused(r, {"d256 bidir n5 cache3000 g8", 5, 16, 2, 256, 3000, 3001, false, 0});
  run_fused(r, {"d256 causal n1 nocache g1", 1, 4, 4, 256, 0, 0, true, 0});
}

void check_fused_d512(Reporter& r) {
  // The 26B model's full-attention layers: Hq 16 over Hkv 2, head dim 512.
  run_fused(r, {"d512 full bidir n256 cache3000 g8", 256, 16, 2, 512, 3000, 3072, false, 0});
  run_fused(r, {"d512 causal n300 cache1023 g8", 300, 16, 2, 512, 1023, 1024, true, 0});
  run_fused(r, {"d512 causal w7 n5 cache7 g2", 5, 4, 2, 512, 7, 9, true, 7});
  run_fused(r, {"d512 bidir n1 nocache g1", 1, 2, 2, 512, 0, 0, false, 0});
  run_fused(r, {"d512 scaling bidir n5 cache1 g1", 5, 2, 2, 512, 1, 3, false, 0, 0.0625f, 6.0f});
}

// Forced split counts: 64 splits of a 1279-key range (splits of one tile, the last ones empty for the
// causal row blocks that see fewer keys), windows that leave whole splits masked for some rows of a
// row block, more splits than key tiles (n = 1, tiny caches: most splits empty), and two splits.
void check_fused_splits(Reporter& r) {
  {
    SplitsKnob knob(64);
    run_fused(r, {"splits64 d256 causal w1024 n256 cache1023 g2", 256, 16, 8, 256, 1023, 1280, true, 1024});
    run_fused(r, {"splits64 d128 causal w40 n100 cache500 g8", 100, 16, 2, 128, 500, 520, true, 40});
    run_fused(r, {"splits64 d512 bidir n1 cache5 g8", 1, 8, 1, 512, 5, 8, false, 0});
    run_fused(r, {"splits64 d64 causal n1 nocache g1", 1, 2, 2, 64, 0, 0, true, 0});
  }
  {
    SplitsKnob knob(7);
    run_fused(r, {"splits7 d256 causal w100 n300 cache3000 g2", 300, 16, 8, 256, 3000, 3100, true, 100});
    run_fused(r, {"splits7 d512 causal n70 cache40 g8", 70, 16, 2, 512, 40, 48, true, 0});
    run_fused(r, {"splits7 d64 causal w3 n50 nocache g2", 50, 4, 2, 64, 0, 0, true, 3});
  }
  {
    SplitsKnob knob(2);
    run_fused(r, {"splits2 d256 bidir n5 cache33 g8", 5, 16, 2, 256, 33, 40, false, 0});
    run_fused(r, {"splits2 d128 causal n300 nocache g1", 300, 4, 4, 128, 0, 0, true, 0});
  }
  {
    SplitsKnob knob(1);  // one split: pass 2 writes the bf16 output itself (no reduce)
    run_fused(r, {"splits1 d256 causal w1024 n256 cache1023 g2", 256, 16, 8, 256, 1023, 1280, true, 1024});
    run_fused(r, {"splits1 d512 bidir n5 cache100 g8", 5, 16, 2, 512, 100, 100, false, 0});
  }
}

// The model's shapes run fused (a plan exists) and with several splits: the denoise layers have only
// 128 row blocks x KV heads, too few CTAs without splits. Also: unsupported head dims get no plan.
void check_fused_plan(Reporter& r) {
  struct Shape {
    const char* name;
    int64_t n, Hq, Hkv, D, L;
    bool causal;
    int64_t window;
    int min_splits;
  };
  const Shape shapes[] = {
      {"denoise sliding D=256 cache 1023", 256, 16, 8, 256, 1023, false, 1024, 2},
      {"denoise full D=512 cache 4096", 256, 16, 2, 512, 4096, false, 0, 2},
      {"prefill 512 causal w1024 D=256", 512, 16, 8, 256, 0, true, 1024, 1},
  };
  for (const Shape& s : shapes) {
    const cuda::FusedAttentionPlan plan =
        cuda::plan_fused_attention(s.n, s.Hq, s.Hkv, s.D, s.L, s.causal, s.window, 0);
    r.note(std::string("fused plan ") + s.name + ": " + std::to_string(plan.splits) + " splits, " +
           std::to_string(plan.workspace_bytes) + " workspace bytes");
    if (plan.splits < s.min_splits) {
      r.fail(std::string("fused plan ") + s.name + ": " + std::to_string(plan.splits) +
             " splits, want >= " + std::to_string(s.min_splits));
    }
    // The workspace holds the (max, sum) partials and, with several splits, the fp32 partial outputs.
    const int64_t rows = s.n * s.Hq;
    const int64_t want = plan.splits > 1 ? plan.splits * rows * (s.D * 4 + 8) : rows * 8;
    if (plan.workspace_bytes < want) {
      r.fail(std::string("fused plan ") + s.name + ": workspace " + std::to_string(plan.workspace_bytes) +
             " bytes < " + std::to_string(want));
    }
  }
  for (int64_t D : {32, 96, 192, 1024}) {
    if (cuda::plan_fused_attention(5, 4, 2, D, 7, false, 0, 0).splits != 0) {
      r.fail("fused plan: head dim " + std::to_string(D) + " is not supported by the kernel, yet has a plan");
    }
  }
  if (cuda::plan_fused_attention(5, 6, 4, 64, 7, false, 0, 0).splits != 0)
    r.fail("fused plan: Hq % Hkv != 0 has a plan");
}

// A long cache: the kernel walks 32768 keys in tiles without any per-key buffer.
void check_fused_long(Reporter& r) {
  run_fused(r, {"d256 bidir n5 cache32768 g2", 5, 4, 2, 256, 32768, 32800, false, 0});
  run_fused(r, {"d512 causal w1024 n5 cache32768 g8", 5, 8, 1, 512, 32768, 32768, true, 1024});
}

}  // namespace

std::vector<Case> fused_attention_cases() {
  return {
      {"fused_attention_d64", check_fused_d64},   {"fused_attention_d128", check_fused_d128},
      {"fused_attention_d256", check_fused_d256}, {"fused_attention_d512", check_fused_d512},
      {"fused_attention_long", check_fused_long}, {"fused_attention_splits", check_fused_splits},
      {"fused_attention_plan", check_fused_plan},
  };
}

}  // namespace dgemma::gpu_test
