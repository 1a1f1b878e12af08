// The residual junction kernels (src/backend/cuda/layer/residual_kernel.cuh) run on the host through
// cuda_emulator.h against the CPU backend's composed ops (backend.cpp: rmsnorm / add / mul / scale),
// bit for bit: one, two and four words per thread (H = 2816 at both of its plans), rows with padding
// threads (H / 8 not a multiple of 32), every optional output present and absent, a row of tiny values
// (eps matters) and, with eps 0, an all-zero row (an infinite inverse norm: the NaNs of the composed
// ops, bit for bit); grids of one block a row and of fewer blocks than rows (each block loops over
// rows, loading the next one ahead), up to thousands of rows. The same kernel source the GPU runs;
// tests/gpu checks it there. The FP8 forms (attn_residual_fp8_kernel, ffn_residual_fp8_kernel) write
// the same bf16 outputs and, byte for byte, the FP8 rows (backend.h Fp8Rows) that
// launch_quantize_fp8_rows's kernel and the CPU reference write for them (fp8_rows_check.h): each of
// out_a / out_b alone and both, next_out, on the same shapes, with norm weights of ordinary and of large
// scale (large outputs), a row of tiny values (E4M3 subnormal codes), a row with one outlier, and the
// all-zero row (eps 0: NaN outputs, code 0x7f, not in the amax).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/tensor.h"
#include "util/bf16.h"

// The emulator first: it provides the device operations that the kernel headers use.
// clang-format off
#include "cuda_emulator.h"
#include "backend/cuda/core/bf16_words.cuh"
#include "backend/cuda/layer/residual_kernel.cuh"
#include "fp8_rows_check.h"
// clang-format on

namespace dgemma {
namespace {

namespace res = cuda::residual;

constexpr int kEmuThreads = 384;  // the model's plan at H = 2816 (352 threads)

Tensor random_rows(std::mt19937& rng, int64_t T, int64_t H, float std, float mean = 0.0f) {
  std::normal_distribution<float> nd(mean, std);
  Tensor t = host_tensor(ScalarType::kBF16, {T, H});
  for (int64_t i = 0; i < T * H; ++i) t.ptr<uint16_t>()[i] = f32_to_bf16(nd(rng));
  return t;
}

Tensor poisoned(int64_t T, int64_t H) {
  Tensor t = host_tensor(ScalarType::kBF16, {T, H});
  for (int64_t i = 0; i < T * H; ++i) t.ptr<uint16_t>()[i] = 0x7fc1;
  return t;
}

const uint4* cw(const Tensor& t) {
  return t.empty() ? nullptr : static_cast<const uint4*>(t.data);
}
uint4* mw(const Tensor& t) {
  return t.empty() ? nullptr : static_cast<uint4*>(t.data);
}

// The attention junction's arguments with poisoned outputs h1, out_a, out_b (the other optional outputs
// are set by the test).
AttnResidualArgs attn_junction(const Tensor& x, const Tensor& o, const Tensor& wp, const Tensor& wa,
                               const Tensor& wb, int64_t T, int64_t H, float eps) {
  AttnResidualArgs c;
  c.x = x;
  c.o = o;
  c.post_norm = wp.reshape({H});
  c.h1 = poisoned(T, H);
  c.norm_a = wa.reshape({H});
  c.out_a = poisoned(T, H);
  c.norm_b = wb.reshape({H});
  c.out_b = poisoned(T, H);
  c.eps = eps;
  return c;
}

// A copy of `c` whose set bf16 outputs are fresh poisoned tensors (the kernel's side).
AttnResidualArgs with_fresh_outputs(const AttnResidualArgs& c) {
  AttnResidualArgs g = c;
  for (Tensor* t : {&g.h1, &g.out_a, &g.out_b, &g.o_normed, &g.router_out})
    if (!t->empty()) *t = poisoned(t->dim(0), t->dim(1));
  return g;
}

// The FFN junction's arguments (scale 0.37) with a poisoned output `out` (the optional outputs are set by
// the test).
FfnResidualArgs ffn_junction(const Tensor& h1, const Tensor& m1, const Tensor& m2, const Tensor& w1,
                             const Tensor& w2, const Tensor& wf, int64_t T, int64_t H, float eps) {
  FfnResidualArgs c;
  c.h1 = h1;
  c.m1 = m1;
  c.m2 = m2;
  c.norm1 = w1.reshape({H});
  c.norm2 = w2.reshape({H});
  c.norm_f = wf.reshape({H});
  c.eps = eps;
  c.scale = 0.37f;
  c.out = poisoned(T, H);
  return c;
}

// A copy of `c` whose set bf16 outputs are fresh poisoned tensors (the kernel's side).
FfnResidualArgs with_fresh_outputs(const FfnResidualArgs& c) {
  FfnResidualArgs g = c;
  for (Tensor* t : {&g.out, &g.m1n, &g.m2n, &g.f, &g.next_out})
    if (!t->empty()) *t = poisoned(t->dim(0), t->dim(1));
  return g;
}

// The kernels' view of the FFN junction's arguments.
res::FfnArgs ffn_kernel_args(const FfnResidualArgs& g, int64_t H, int64_t T) {
  const bool slots = !g.m2_slots.empty();
  return res::FfnArgs{cw(g.h1),  cw(g.m1),        cw(g.m2),       cw(g.norm1), cw(g.norm2), cw(g.norm_f),
                      g.scale,   mw(g.out),       mw(g.m1n),      mw(g.m2n),   mw(g.f),     cw(g.next_norm),
                      mw(g.next_out), H / 8, g.eps, T, cw(g.m2_slots),
                      slots ? g.m2_order.ptr<int32_t>() : nullptr, slots ? static_cast<int>(g.m2_order.dim(1)) : 0};
}

// The kernels' view of the attention junction's arguments (rows of `H` / 8 words).
res::AttnArgs attn_kernel_args(const AttnResidualArgs& g, int64_t H, int64_t T) {
  return res::AttnArgs{cw(g.x),     cw(g.o),      cw(g.post_norm), mw(g.h1),       cw(g.norm_a),
                       mw(g.out_a), cw(g.norm_b), mw(g.out_b),     mw(g.o_normed), cw(g.router_scale),
                       g.router_root, mw(g.router_out), H / 8, g.eps, T};
}

void expect_same(const std::string& what, const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  const uint16_t* g = got.ptr<uint16_t>();
  const uint16_t* w = want.ptr<uint16_t>();
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_EQ(g[i], w[i]) << what << ": element " << i << " of " << got.numel();
}

// Every optional output of the FFN junction asked for (poisoned), with the next layer's norm `wn`.
void ask_every_ffn_output(FfnResidualArgs& c, const Tensor& wn, int64_t T, int64_t H) {
  c.m1n = poisoned(T, H);
  c.m2n = poisoned(T, H);
  c.f = poisoned(T, H);
  c.next_norm = wn.reshape({H});
  c.next_out = poisoned(T, H);
}

// The kernel's bf16 outputs (g) against the composed ops' (c): out, and each optional one asked for.
void expect_same_ffn_outputs(const std::string& name, const FfnResidualArgs& g, const FfnResidualArgs& c) {
  expect_same(name + " out", g.out, c.out);
  if (!c.m1n.empty()) expect_same(name + " m1n", g.m1n, c.m1n);
  if (!c.m2n.empty()) expect_same(name + " m2n", g.m2n, c.m2n);
  if (!c.f.empty()) expect_same(name + " f", g.f, c.f);
  if (!c.next_out.empty()) expect_same(name + " next_out", g.next_out, c.next_out);
}

// Rows of the test: random, then a row of tiny values, then (eps 0 only) an all-zero row.
void shape_rows(Tensor& t, int64_t H, bool zero_row) {
  const int64_t T = t.dim(0);
  uint16_t* p = t.ptr<uint16_t>();
  for (int64_t i = 0; i < H; ++i) p[(T - 1) * H + i] = f32_to_bf16(1e-4f * bf16_to_f32(p[(T - 1) * H + i]));
  if (zero_row)
    for (int64_t i = 0; i < H; ++i) p[(T - 2) * H + i] = 0;
}

template <typename F>
void launch_plan(const res::Plan& plan, int grid, F&& run) {
  ASSERT_GT(plan.per, 0);
  ASSERT_LE(plan.threads, kEmuThreads);
  emu::launch([&] { run(plan.per); }, grid, 1, res::kScratchDoubles * 8, plan.threads);
}

// grid 0: one block a row.
struct Shape {
  int64_t T, H;
  float eps;
  int grid = 0;
  int max_threads = kEmuThreads;
};

std::string name_of(const Shape& s, const res::Plan& p) {
  return "T=" + std::to_string(s.T) + " H=" + std::to_string(s.H) + " eps=" + std::to_string(s.eps) +
         " per=" + std::to_string(p.per) + " threads=" + std::to_string(p.threads) +
         " grid=" + std::to_string(s.grid > 0 ? s.grid : s.T);
}

const Shape kShapes[] = {{4, 2816, 1e-6f},          {5, 2816, 1e-6f, 2},      {3, 2816, 1e-6f, 0, 256},
                         {3, 2048, 1e-6f},          {4, 1000, 0.0f},          {7, 1000, 0.0f, 3},
                         {3, 8, 1e-6f},             {3, 5000, 1e-6f},         {5, 5000, 1e-6f, 2},
                         {3, 24, 0.0f},             {2048, 64, 1e-6f, 37},    {1500, 24, 0.0f, 8}};

// The FFN junction's kernel over the shape's grid at the plan's words a thread: the plain form, or with
// qn the FP8 form writing those rows.
void run_ffn_junction(const res::Plan& plan, const Shape& s, const res::FfnArgs& a,
                      const res::Fp8RowsOut* qn = nullptr) {
  launch_plan(plan, s.grid > 0 ? s.grid : static_cast<int>(s.T), [&](int per) {
    if (qn != nullptr) {
      if (per == 1)
        res::ffn_residual_fp8_kernel<1>(a, *qn);
      else if (per == 2)
        res::ffn_residual_fp8_kernel<2>(a, *qn);
      else
        res::ffn_residual_fp8_kernel<4>(a, *qn);
    } else if (per == 1) {
      res::ffn_residual_kernel<1>(a);
    } else if (per == 2) {
      res::ffn_residual_kernel<2>(a);
    } else {
      res::ffn_residual_kernel<4>(a);
    }
  });
}

TEST(ResidualEmulated, PlanCoversTheModelShapes) {
  EXPECT_EQ(res::plan_for(352).per, 1);  // H = 2816: one word a thread
  EXPECT_EQ(res::plan_for(352).threads, 352);
  EXPECT_EQ(res::plan_for(1).threads, 32);
  EXPECT_EQ(res::plan_for(512).per, 2);
  EXPECT_EQ(res::plan_for(2048).per, 4);
  EXPECT_EQ(res::plan_for(2048).threads, 512);
  EXPECT_EQ(res::plan_for(2049).per, 0);  // H > 16384: the composed ops (residual_fusable)
  for (int64_t words = 1; words <= 2048; ++words) {
    const res::Plan p = res::plan_for(words);
    ASSERT_TRUE(p.threads % 32 == 0 && p.threads >= 32 && p.threads <= res::kMaxThreads) << words;
    ASSERT_GE(int64_t{p.per} * p.threads, words) << words;
  }
}

TEST(ResidualEmulated, AttnJunctionMatchesComposedOps) {
  std::mt19937 rng(2024);
  auto cpu = make_cpu_backend();
  for (const Shape& s : kShapes) {
    const res::Plan plan = res::plan_for(s.H / 8, s.max_threads);
    const float root = 1.0f / std::sqrt(static_cast<float>(s.H));
    Tensor x = random_rows(rng, s.T, s.H, 3.0f), o = random_rows(rng, s.T, s.H, 0.5f);
    shape_rows(o, s.H, s.eps == 0.0f);
    shape_rows(x, s.H, s.eps == 0.0f);
    Tensor wp = random_rows(rng, 1, s.H, 0.3f, 1.0f), wa = random_rows(rng, 1, s.H, 0.3f, 1.0f);
    Tensor wb = random_rows(rng, 1, s.H, 0.3f, 1.0f), wr = random_rows(rng, 1, s.H, 0.2f, 1.0f);
    for (bool extras : {true, false}) {
      const std::string name = name_of(s, plan) + (extras ? " o_normed + router" : " plain");
      AttnResidualArgs c = attn_junction(x, o, wp, wa, wb, s.T, s.H, s.eps);
      if (extras) {
        c.o_normed = poisoned(s.T, s.H);
        c.router_scale = wr.reshape({s.H});
        c.router_out = poisoned(s.T, s.H);
        c.router_root = root;
      }
      const AttnResidualArgs g = with_fresh_outputs(c);
      cpu->attn_residual(c);
      const res::AttnArgs a = attn_kernel_args(g, s.H, s.T);
      launch_plan(plan, s.grid > 0 ? s.grid : static_cast<int>(s.T), [&](int per) {
        if (per == 1)
          res::attn_residual_kernel<1>(a);
        else if (per == 2)
          res::attn_residual_kernel<2>(a);
        else
          res::attn_residual_kernel<4>(a);
      });
      expect_same(name + " h1", g.h1, c.h1);
      expect_same(name + " out_a", g.out_a, c.out_a);
      expect_same(name + " out_b", g.out_b, c.out_b);
      if (extras) {
        expect_same(name + " o_normed", g.o_normed, c.o_normed);
        expect_same(name + " router_out", g.router_out, c.router_out);
      }
    }
  }
}

TEST(ResidualEmulated, FfnJunctionMatchesComposedOps) {
  std::mt19937 rng(77);
  auto cpu = make_cpu_backend();
  for (const Shape& s : kShapes) {
    const res::Plan plan = res::plan_for(s.H / 8, s.max_threads);
    Tensor h1 = random_rows(rng, s.T, s.H, 3.0f), m1 = random_rows(rng, s.T, s.H, 2.0f);
    Tensor m2 = random_rows(rng, s.T, s.H, 0.2f);
    shape_rows(m1, s.H, s.eps == 0.0f);
    shape_rows(m2, s.H, s.eps == 0.0f);
    Tensor w1 = random_rows(rng, 1, s.H, 0.3f, 1.0f), w2 = random_rows(rng, 1, s.H, 0.3f, 1.0f);
    Tensor wf = random_rows(rng, 1, s.H, 0.3f, 1.0f), wn = random_rows(rng, 1, s.H, 0.3f, 1.0f);
    for (bool extras : {true, false}) {
      const std::string name = name_of(s, plan) + (extras ? " dumps + next norm" : " plain");
      FfnResidualArgs c = ffn_junction(h1, m1, m2, w1, w2, wf, s.T, s.H, s.eps);
      if (extras) ask_every_ffn_output(c, wn, s.T, s.H);
      const FfnResidualArgs g = with_fresh_outputs(c);
      cpu->ffn_residual(c);
      const res::FfnArgs a = ffn_kernel_args(g, s.H, s.T);
      run_ffn_junction(plan, s, a);
      expect_same_ffn_outputs(name, g, c);
    }
  }
}

// FP8 rows of a [T, H] output (host tensors), their codes poisoned.
Fp8Rows fp8_rows(int64_t T, int64_t H) {
  Fp8Rows r{host_tensor(ScalarType::kU8, {T, H}), host_tensor(ScalarType::kF32, {T})};
  std::memset(r.codes.data, 0xa5, r.codes.nbytes());
  for (int64_t t = 0; t < T; ++t) r.scales.ptr<float>()[t] = -1.0f;
  return r;
}

uint2* codes_of(const Fp8Rows& r) {
  return r.empty() ? nullptr : static_cast<uint2*>(r.codes.data);
}
float* scales_of(const Fp8Rows& r) {
  return r.empty() ? nullptr : r.scales.ptr<float>();
}

void expect_same_rows(const std::string& what, const Fp8Rows& got, const Fp8Rows& want) {
  ASSERT_EQ(got.codes.nbytes(), want.codes.nbytes()) << what;
  ASSERT_EQ(std::memcmp(got.codes.data, want.codes.data, got.codes.nbytes()), 0) << what << ": codes";
  ASSERT_EQ(std::memcmp(got.scales.data, want.scales.data, got.scales.nbytes()), 0) << what << ": scales";
}

// The first row with a single outlier (its other values then quantise to small and subnormal codes).
void add_outlier(Tensor& t) {
  t.ptr<uint16_t>()[3] = f32_to_bf16(200.0f);
}

TEST(ResidualEmulated, AttnJunctionWritesTheFp8RowsOfItsOutputs) {
  std::mt19937 rng(4242);
  auto cpu = make_cpu_backend();
  for (const Shape& s : kShapes) {
    if (s.T < 3) continue;
    const res::Plan plan = res::plan_for(s.H / 8, s.max_threads);
    Tensor x = random_rows(rng, s.T, s.H, 3.0f), o = random_rows(rng, s.T, s.H, 0.5f);
    shape_rows(o, s.H, s.eps == 0.0f);
    shape_rows(x, s.H, s.eps == 0.0f);
    add_outlier(x);
    for (const float wscale : {1.0f, 600.0f}) {  // ordinary outputs, and outputs in the thousands
      Tensor wp = random_rows(rng, 1, s.H, 0.3f, 1.0f), wa = random_rows(rng, 1, s.H, 0.3f * wscale, wscale);
      Tensor wb = random_rows(rng, 1, s.H, 0.3f, 1.0f), wr = random_rows(rng, 1, s.H, 0.2f, 1.0f);
      for (int mode = 0; mode < 3; ++mode) {  // out_a and out_b, out_a alone, out_b alone
        const std::string name =
            name_of(s, plan) + " wscale=" + std::to_string(wscale) + " mode=" + std::to_string(mode);
        AttnResidualArgs c = attn_junction(x, o, wp, wa, wb, s.T, s.H, s.eps);
        c.router_scale = wr.reshape({s.H});
        c.router_out = poisoned(s.T, s.H);
        c.router_root = 0.125f;
        if (mode != 2) c.out_a_fp8 = fp8_rows(s.T, s.H);
        if (mode != 1) c.out_b_fp8 = fp8_rows(s.T, s.H);
        AttnResidualArgs g = with_fresh_outputs(c);
        if (mode != 2) g.out_a_fp8 = fp8_rows(s.T, s.H);
        if (mode != 1) g.out_b_fp8 = fp8_rows(s.T, s.H);
        cpu->attn_residual(c);  // the composed ops, then the CPU reference's quantisation
        const res::AttnArgs a = attn_kernel_args(g, s.H, s.T);
        const res::Fp8RowsOut qa{codes_of(g.out_a_fp8), scales_of(g.out_a_fp8)};
        const res::Fp8RowsOut qb{codes_of(g.out_b_fp8), scales_of(g.out_b_fp8)};
        launch_plan(plan, s.grid > 0 ? s.grid : static_cast<int>(s.T), [&](int per) {
          if (per == 1)
            res::attn_residual_fp8_kernel<1>(a, qa, qb);
          else if (per == 2)
            res::attn_residual_fp8_kernel<2>(a, qa, qb);
          else
            res::attn_residual_fp8_kernel<4>(a, qa, qb);
        });
        expect_same(name + " h1", g.h1, c.h1);
        expect_same(name + " out_a", g.out_a, c.out_a);
        expect_same(name + " out_b", g.out_b, c.out_b);
        expect_same(name + " router_out", g.router_out, c.router_out);
        for (int k = 0; k < 2; ++k) {
          const Fp8Rows& got = k == 0 ? g.out_a_fp8 : g.out_b_fp8;
          if (got.empty()) continue;
          const Tensor& out = k == 0 ? g.out_a : g.out_b;
          const std::string what = name + (k == 0 ? " out_a_fp8" : " out_b_fp8");
          expect_same_rows(what, got, k == 0 ? c.out_a_fp8 : c.out_b_fp8);
          fp8_rows_check::expect_fp8_rows_of(what, out.ptr<uint16_t>(), s.T, s.H, got.codes.ptr<uint8_t>(),
                                             got.scales.ptr<float>());
        }
      }
    }
  }
}

TEST(ResidualEmulated, FfnJunctionWritesTheFp8RowsOfNextOut) {
  std::mt19937 rng(99);
  auto cpu = make_cpu_backend();
  for (const Shape& s : kShapes) {
    if (s.T < 3) continue;
    const res::Plan plan = res::plan_for(s.H / 8, s.max_threads);
    Tensor h1 = random_rows(rng, s.T, s.H, 3.0f), m1 = random_rows(rng, s.T, s.H, 2.0f);
    Tensor m2 = random_rows(rng, s.T, s.H, 0.2f);
    shape_rows(m1, s.H, s.eps == 0.0f);
    shape_rows(m2, s.H, s.eps == 0.0f);
    shape_rows(h1, s.H, s.eps == 0.0f);
    add_outlier(h1);
    for (const float wscale : {1.0f, 600.0f}) {
      Tensor w1 = random_rows(rng, 1, s.H, 0.3f, 1.0f), w2 = random_rows(rng, 1, s.H, 0.3f, 1.0f);
      Tensor wf = random_rows(rng, 1, s.H, 0.3f, 1.0f), wn = random_rows(rng, 1, s.H, 0.3f * wscale, wscale);
      const std::string name = name_of(s, plan) + " wscale=" + std::to_string(wscale);
      FfnResidualArgs c = ffn_junction(h1, m1, m2, w1, w2, wf, s.T, s.H, s.eps);
      c.next_norm = wn.reshape({s.H});
      c.next_out = poisoned(s.T, s.H);
      c.next_out_fp8 = fp8_rows(s.T, s.H);
      FfnResidualArgs g = with_fresh_outputs(c);
      g.next_out_fp8 = fp8_rows(s.T, s.H);
      cpu->ffn_residual(c);
      const res::FfnArgs a = ffn_kernel_args(g, s.H, s.T);
      const res::Fp8RowsOut qn{codes_of(g.next_out_fp8), scales_of(g.next_out_fp8)};
      run_ffn_junction(plan, s, a, &qn);
      expect_same(name + " out", g.out, c.out);
      expect_same(name + " next_out", g.next_out, c.next_out);
      expect_same_rows(name + " next_out_fp8", g.next_out_fp8, c.next_out_fp8);
      fp8_rows_check::expect_fp8_rows_of(name + " next_out_fp8", g.next_out.ptr<uint16_t>(), s.T, s.H,
                                         g.next_out_fp8.codes.ptr<uint8_t>(),
                                         g.next_out_fp8.scales.ptr<float>());
    }
  }
}

// The MoE's slot rows of T tokens (K a token, each row times a small scale) and their order (a random
// permutation a token), with the rows shaped as shape_rows shapes a whole row: the last token's slots
// tiny, and (zero_row) the next-to-last token's all zero.
struct MoeSlots {
  Tensor rows, order;
};
MoeSlots random_slots(std::mt19937& rng, int64_t T, int64_t H, int K, bool zero_row) {
  MoeSlots m{random_rows(rng, T * K, H, 0.1f), host_tensor(ScalarType::kI32, {T, K})};
  uint16_t* y = m.rows.ptr<uint16_t>();
  for (int64_t i = (T - 1) * K * H; i < T * K * H; ++i) y[i] = f32_to_bf16(1e-4f * bf16_to_f32(y[i]));
  if (zero_row)
    for (int64_t i = (T - 2) * K * H; i < (T - 1) * K * H; ++i) y[i] = 0;
  std::vector<int32_t> perm(K);
  for (int64_t t = 0; t < T; ++t) {
    for (int k = 0; k < K; ++k) perm[k] = k;
    std::shuffle(perm.begin(), perm.end(), rng);
    std::memcpy(m.order.ptr<int32_t>() + t * K, perm.data(), K * sizeof(int32_t));
  }
  return m;
}

// Their sum as the CPU's MoE takes it (cpu/moe.cpp): per token, the bf16 running sum in the given order.
Tensor sum_of_slots(const MoeSlots& m, int64_t T, int64_t H, int K) {
  Tensor out = host_tensor(ScalarType::kBF16, {T, H});
  const uint16_t* y = m.rows.ptr<uint16_t>();
  const int32_t* order = m.order.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < H; ++i) {
      float acc = 0.f;
      for (int j = 0; j < K; ++j) acc = round_bf16(acc + bf16_to_f32(y[(t * K + order[t * K + j]) * H + i]));
      out.ptr<uint16_t>()[t * H + i] = f32_to_bf16(acc);
    }
  return out;
}

// The junction given the slots sums them itself, as the combine kernel does (core/ordered_sum.cuh): every
// output, and the FP8 form's rows, are what the composed ops give on their sum, bit for bit, for top-k 1,
// 3 (no group of eight), 8 (the model's) and 11 (a group of eight and a tail), at every shape.
TEST(ResidualEmulated, FfnJunctionSumsTheMoeSlots) {
  std::mt19937 rng(2718);
  auto cpu = make_cpu_backend();
  for (const Shape& s : kShapes) {
    if (s.T < 3) continue;
    const res::Plan plan = res::plan_for(s.H / 8, s.max_threads);
    Tensor h1 = random_rows(rng, s.T, s.H, 3.0f), m1 = random_rows(rng, s.T, s.H, 2.0f);
    shape_rows(m1, s.H, s.eps == 0.0f);
    Tensor w1 = random_rows(rng, 1, s.H, 0.3f, 1.0f), w2 = random_rows(rng, 1, s.H, 0.3f, 1.0f);
    Tensor wf = random_rows(rng, 1, s.H, 0.3f, 1.0f), wn = random_rows(rng, 1, s.H, 0.3f, 1.0f);
    for (const int K : {1, 3, 8, 11}) {
      const MoeSlots slots = random_slots(rng, s.T, s.H, K, s.eps == 0.0f);
      const Tensor m2 = sum_of_slots(slots, s.T, s.H, K);
      for (const bool fp8 : {false, true}) {
        const std::string name = name_of(s, plan) + " top_k=" + std::to_string(K) + (fp8 ? " fp8" : "");
        FfnResidualArgs c = ffn_junction(h1, m1, m2, w1, w2, wf, s.T, s.H, s.eps);
        ask_every_ffn_output(c, wn, s.T, s.H);
        if (fp8) c.next_out_fp8 = fp8_rows(s.T, s.H);
        FfnResidualArgs g = with_fresh_outputs(c);
        g.m2 = Tensor{};
        g.m2_slots = slots.rows;
        g.m2_order = slots.order;
        if (fp8) g.next_out_fp8 = fp8_rows(s.T, s.H);
        cpu->ffn_residual(c);
        const res::FfnArgs a = ffn_kernel_args(g, s.H, s.T);
        ASSERT_EQ(a.m2, nullptr);
        ASSERT_EQ(a.top_k, K);
        const res::Fp8RowsOut qn{codes_of(g.next_out_fp8), scales_of(g.next_out_fp8)};
        run_ffn_junction(plan, s, a, fp8 ? &qn : nullptr);
        expect_same_ffn_outputs(name, g, c);
        if (fp8) expect_same_rows(name + " next_out_fp8", g.next_out_fp8, c.next_out_fp8);
      }
    }
  }
}

}  // namespace
}  // namespace dgemma
