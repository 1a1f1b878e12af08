// Checks of the fused small kernels of a layer against the sequences they replace: the attention
// prologue (qkv_prologue.cu: q/k norms + RoPE, v's unit norm) against the rmsnorm / rope / copy ops
// on the GPU (bit-identical) and the CPU's composition; the MoE routing (register top-k fused with
// the grouping, vectorised combine, moe_route.cu) against the earlier routing kernels (bit-identical
// probabilities, experts, weights, grouping and outputs) on random, tied, skewed and NaN router
// logits; the router's input computed by the attention's residual junction and the next layer's
// input norm by the FFN's. Plus
// `dgemma_gpu_check --bench` rows, the earlier sequence against the new one.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/grouped_moe.cuh"
#include "backend/cuda/moe.cuh"
#include "backend/cuda/tuning.h"
#include "gpu_check_util.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "util/bf16.h"

namespace dgemma::gpu_test {
namespace {

// ---- qkv prologue -----------------------------------------------------------------------------

struct QkvShape {
  int64_t T, Hq, Hkv, D;
  bool k_eq_v;
  RopeParams rope;
};

std::string qkv_name(const QkvShape& s) {
  return "qkv_prologue T=" + std::to_string(s.T) + " Hq=" + std::to_string(s.Hq) + " Hkv=" + std::to_string(s.Hkv) +
         " D=" + std::to_string(s.D) + (s.k_eq_v ? " K=V" : "");
}

void check_qkv_prologue(Reporter& r) {
  Data d("qkv_prologue");
  // The rope tolerance of gpu_check_ops (cos/sin in double against glibc's cosf/sinf), and the norms'
  // 1/sqrt: the CPU comparison only; fused against unfused on the GPU is exact.
  const Tol rope_tol{4, 0.0, 1e-4, 0.999, 1e-5};
  const Tol libm_tol{1, 0.0, 1e-4, 0.9999, 1e-6};
  const RopeParams sliding{RopeType::kDefault, 10000.0, 1.0}, full{RopeType::kProportional, 1e6, 0.25};
  for (const QkvShape& s : {QkvShape{37, 16, 8, 256, false, sliding}, QkvShape{29, 16, 2, 512, true, full},
                            QkvShape{20, 4, 2, 16, false, sliding}, QkvShape{300, 8, 4, 128, false, sliding},
                            QkvShape{3, 5, 1, 64, true, sliding},
                            // more rows than two per warp: later rounds, a last pair of one row
                            QkvShape{40, 32, 16, 128, false, sliding}, QkvShape{9, 24, 8, 512, false, full},
                            // the token loop: more tokens than resident blocks (26B-A4B shapes)
                            QkvShape{1500, 16, 8, 256, false, sliding}, QkvShape{700, 16, 2, 512, true, full},
                            QkvShape{300, 3, 1, 48, true, sliding} /* half rows of 3 words: idle lanes */,
                            QkvShape{7, 3, 1, 20, true, sliding} /* D % 16 != 0: the composed ops */}) {
    const std::string name = qkv_name(s);
    std::vector<float> inv = rope_inv_freq(s.rope, static_cast<int>(s.D));
    std::vector<int32_t> pos(static_cast<size_t>(s.T));
    for (auto& p : pos) p = static_cast<int32_t>(d.integer(0, 9000));
    pos[0] = 0;
    Tensor q = d.bf16({s.T, s.Hq, s.D}, 2.0f), k = d.bf16({s.T, s.Hkv, s.D}, 1.0f), v = d.bf16({s.T, s.Hkv, s.D}, 3.0f);
    // A head row of tiny values (eps matters there) in each.
    for (Tensor* t : {&q, &k, &v})
      for (int64_t i = 0; i < s.D; ++i) t->ptr<uint16_t>()[i] = f32_to_bf16(1e-4f * bf16_to_f32(t->ptr<uint16_t>()[i]));
    Tensor wq = d.bf16({s.D}, 0.3f, 1.0f), wk = d.bf16({s.D}, 0.3f, 1.0f);
    QkvPrologueArgs c;
    c.q = clone(q);
    c.k = clone(k);
    c.v = s.k_eq_v ? host_tensor(ScalarType::kBF16, {s.T, s.Hkv, s.D}) : clone(v);
    c.k_eq_v = s.k_eq_v;
    c.q_norm = wq;
    c.k_norm = wk;
    c.positions = host_i32(pos);
    c.inv_freq = host_f32(inv);
    c.eps = 1e-6f;
    cpu().qkv_prologue(c);
    auto gpu_args = [&] {
      QkvPrologueArgs g = c;
      g.q = up(q);
      g.k = up(k);
      g.v = s.k_eq_v ? poisoned(ScalarType::kBF16, {s.T, s.Hkv, s.D}) : up(v);  // K=V: output only
      g.q_norm = up(wq);
      g.k_norm = up(wk);
      g.positions = up(c.positions);
      g.inv_freq = up(c.inv_freq);
      return g;
    };
    QkvPrologueArgs unfused = gpu_args(), fused = gpu_args(), rows = gpu_args();
    {
      Scoped<bool> off(cuda::set_fused_qkv_prologue, false);
      cuda().qkv_prologue(unfused);
    }
    {
      Scoped<bool> on(cuda::set_fused_qkv_prologue, true);
      cuda().qkv_prologue(fused);
      Scoped<int> row(cuda::set_small_kernel_variant, 2);  // the earlier kernel: a warp a head row
      cuda().qkv_prologue(rows);
    }
    expect_bf16(r, name + " q (row kernel vs ops)", u16(rows.q), u16(unfused.q), exact_tol());
    expect_bf16(r, name + " k (row kernel vs ops)", u16(rows.k), u16(unfused.k), exact_tol());
    expect_bf16(r, name + " v (row kernel vs ops)", u16(rows.v), u16(unfused.v), exact_tol());
    expect_bf16(r, name + " q (fused vs ops)", u16(fused.q), u16(unfused.q), exact_tol());
    expect_bf16(r, name + " k (fused vs ops)", u16(fused.k), u16(unfused.k), exact_tol());
    expect_bf16(r, name + " v (fused vs ops)", u16(fused.v), u16(unfused.v), exact_tol());
    expect_bf16(r, name + " q (vs CPU)", u16(fused.q), u16(c.q), rope_tol);
    expect_bf16(r, name + " k (vs CPU)", u16(fused.k), u16(c.k), rope_tol);
    expect_bf16(r, name + " v (vs CPU)", u16(fused.v), u16(c.v), libm_tol);
  }
}

// ---- MoE routing ------------------------------------------------------------------------------

enum class Logits { kRandom, kTied, kNan };

struct RouteShape {
  int64_t T, H, I, E;
  int K;
  Logits logits = Logits::kRandom;
};

MoeArgs route_inputs(Data& d, const RouteShape& s) {
  MoeArgs a;
  a.router_in = d.bf16({s.T, s.H}, 3.0f);
  a.expert_in = d.bf16({s.T, s.H}, 1.0f);
  a.router_scale = d.bf16({s.H}, 0.2f, 1.0f);
  a.router_proj = d.bf16({s.E, s.H}, 1.0f);
  a.per_expert_scale = d.bf16_uniform({s.E}, 0.5f, 1.5f);
  // The expert weights straight on the device (route_on_gpu): only GPU runs are compared here, and
  // host random numbers for E x 2I x H would dominate the check's time.
  a.top_k = s.K;
  a.eps = 1e-6f;
  uint16_t* w = a.router_proj.ptr<uint16_t>();
  if (s.logits == Logits::kTied) {
    // Every fourth expert a copy of the one before it: equal logits, equal probabilities, and the tie
    // goes to the lower index.
    for (int64_t e = 1; e < s.E; e += 4) std::memcpy(w + e * s.H, w + (e - 1) * s.H, static_cast<size_t>(s.H) * 2);
  } else if (s.logits == Logits::kNan) {
    // An infinite router input element in some tokens: their norm and every logit turn NaN, and the
    // routing falls back to the lowest indices.
    for (int64_t t = 0; t < s.T; t += 5) a.router_in.ptr<uint16_t>()[t * s.H + 1] = 0x7f80;
  }
  return a;
}

// A bf16 device tensor of N(0, std^2) values from the backend's counter-based fill (fresh per call).
Tensor device_normal(std::initializer_list<int64_t> dims, float std) {
  static uint64_t calls = 0;
  Tensor t = cuda().alloc(ScalarType::kBF16, dims);
  cuda().fill_normal(t, run_seed() + ++calls, 0.0f, std);
  return t;
}

MoeArgs route_on_gpu(const MoeArgs& h, const RouteShape& s, const Tensor& gate_up, const Tensor& down) {
  MoeArgs g = h;
  g.router_in = up(h.router_in);
  g.expert_in = up(h.expert_in);
  g.router_scale = up(h.router_scale);
  g.router_proj = up(h.router_proj);
  g.per_expert_scale = up(h.per_expert_scale);
  g.gate_up = gate_up;
  g.down = down;
  g.out = poisoned(ScalarType::kBF16, {s.T, s.H});
  g.dbg_probs = host_tensor(ScalarType::kF32, {s.T, s.E});
  g.dbg_weights = host_tensor(ScalarType::kF32, {s.T, s.K});
  g.dbg_index = host_tensor(ScalarType::kI32, {s.T, s.K});
  std::fill_n(g.dbg_probs.ptr<float>(), s.T * s.E, 0.5f);
  std::fill_n(g.dbg_weights.ptr<float>(), s.T * s.K, 0.5f);
  std::fill_n(g.dbg_index.ptr<int32_t>(), s.T * s.K, -7);
  return g;
}

// Bitwise equality of two host buffers, reporting the first difference.
void expect_same_bits(Reporter& r, const std::string& what, const void* got, const void* want, int64_t n, int64_t elem) {
  const auto* a = static_cast<const unsigned char*>(got);
  const auto* b = static_cast<const unsigned char*>(want);
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(a + i * elem, b + i * elem, static_cast<size_t>(elem)) != 0) {
      r.fail(what + ": element " + std::to_string(i) + " of " + std::to_string(n) + " differs");
      return;
    }
  r.note(what + ": " + std::to_string(n) + " elements bit-identical");
}

void check_moe_routing(Reporter& r) {
  Data d("moe_routing");
  for (const RouteShape& s : {RouteShape{37, 64, 32, 8, 2}, RouteShape{37, 64, 32, 8, 2, Logits::kNan},
                              RouteShape{64, 2816, 704, 128, 8}, RouteShape{300, 2816, 704, 128, 8, Logits::kTied},
                              RouteShape{45, 96, 16, 48, 5, Logits::kTied}, RouteShape{33, 64, 16, 200, 6},
                              RouteShape{21, 64, 16, 300, 4} /* E > 256: the earlier top-k kernel */,
                              RouteShape{1024, 2816, 704, 128, 8}, RouteShape{19, 2816, 704, 128, 8, Logits::kNan},
                              RouteShape{9, 40, 16, 32, 32} /* K = E */}) {
    const std::string name = "routing T=" + std::to_string(s.T) + " E=" + std::to_string(s.E) + " k=" +
                             std::to_string(s.K) + (s.logits == Logits::kTied ? " tied" : s.logits == Logits::kNan ? " NaN" : "");
    const MoeArgs h = route_inputs(d, s);
    const Tensor gate_up = device_normal({s.E, 2 * s.I, s.H}, 1.0f / std::sqrt(static_cast<float>(s.H)));
    const Tensor down = device_normal({s.E, s.H, s.I}, 1.0f / std::sqrt(static_cast<float>(s.I)));
    MoeArgs old_args = route_on_gpu(h, s, gate_up, down), new_args = route_on_gpu(h, s, gate_up, down);
    {
      Scoped<bool> off(cuda::set_fused_moe_routing, false);
      cuda().moe(old_args);
      cuda().synchronize();
    }
    {
      Scoped<bool> on(cuda::set_fused_moe_routing, true);
      cuda().moe(new_args);
      cuda().synchronize();
    }
    expect_same_bits(r, name + " probs", new_args.dbg_probs.data, old_args.dbg_probs.data, s.T * s.E, 4);
    expect_same_bits(r, name + " experts", new_args.dbg_index.data, old_args.dbg_index.data, s.T * s.K, 4);
    expect_same_bits(r, name + " weights", new_args.dbg_weights.data, old_args.dbg_weights.data, s.T * s.K, 4);
    const std::vector<uint16_t> on = u16(new_args.out), oo = u16(old_args.out);
    expect_same_bits(r, name + " out", on.data(), oo.data(), s.T * s.H, 2);
    if (s.logits == Logits::kNan) {
      // The NaN tokens take experts 0 .. K-1 (the lowest untaken index each round).
      const int32_t* idx = new_args.dbg_index.ptr<int32_t>();
      for (int64_t t = 0; t < s.T; t += 5)
        for (int k = 0; k < s.K; ++k)
          if (idx[t * s.K + k] != k) {
            r.fail(name + ": NaN token " + std::to_string(t) + " slot " + std::to_string(k) + " took expert " +
                   std::to_string(idx[t * s.K + k]));
            t = s.T;
            break;
          }
    }
  }
}

// The router's input from the attention's residual junction (AttnResidualArgs::router_out) against
// the composed ops on the GPU (exact) and the CPU (the norms' 1/sqrt: libm_tol), and the MoE block
// given it (MoeArgs::router_z) against the MoE block norming h1 itself: the same routing and output,
// bit for bit.
void check_router_input(Reporter& r) {
  Data d("router_input");
  const Tol libm_tol{1, 0.0, 1e-4, 0.9999, 1e-6};
  for (const int64_t T : {1, 37, 256}) {
    const int64_t H = 2816, I = 704, E = 128;
    const int K = 8;
    const std::string sz = " T=" + std::to_string(T);
    const float root = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
    Tensor x = d.bf16({T, H}, 3.0f), o = d.bf16({T, H}, 0.5f);
    Tensor wp = d.bf16({H}, 0.3f, 1.0f), wa = d.bf16({H}, 0.3f, 1.0f), wb = d.bf16({H}, 0.3f, 1.0f);
    Tensor ws = d.bf16({H}, 0.2f, 1.0f);
    auto host = [&] { return host_tensor(ScalarType::kBF16, {T, H}); };
    auto dev = [&] { return poisoned(ScalarType::kBF16, {T, H}); };
    AttnResidualArgs c{x, o, wp, host(), wa, host(), wb, host(), 1e-6f, Tensor{}, ws, host(), root};
    AttnResidualArgs g{up(x), up(o), up(wp), dev(), up(wa), dev(), up(wb), dev(), 1e-6f, Tensor{}, up(ws), dev(), root};
    AttnResidualArgs gc = g;  // the composed ops on the GPU
    gc.h1 = dev();
    gc.out_a = dev();
    gc.out_b = dev();
    gc.router_out = dev();
    cpu().attn_residual(c);
    cuda().attn_residual(g);
    cuda().Backend::attn_residual(gc);
    expect_bf16(r, "router_out (fused vs ops)" + sz, u16(g.router_out), u16(gc.router_out), exact_tol());
    expect_bf16(r, "h1 (fused vs ops)" + sz, u16(g.h1), u16(gc.h1), exact_tol());
    expect_bf16(r, "router_out (vs CPU)" + sz, u16(g.router_out), u16(c.router_out), libm_tol);

    MoeArgs m;
    m.router_in = g.h1;
    m.expert_in = g.out_b;
    m.router_scale = up(ws);
    m.router_proj = up(d.bf16({E, H}, 1.0f));
    m.per_expert_scale = up(d.bf16_uniform({E}, 0.5f, 1.5f));
    m.gate_up = device_normal({E, 2 * I, H}, 1.0f / std::sqrt(static_cast<float>(H)));
    m.down = device_normal({E, H, I}, 1.0f / std::sqrt(static_cast<float>(I)));
    m.top_k = K;
    m.eps = 1e-6f;
    auto with_outputs = [&](MoeArgs a) {
      a.out = poisoned(ScalarType::kBF16, {T, H});
      a.dbg_probs = host_tensor(ScalarType::kF32, {T, E});
      a.dbg_weights = host_tensor(ScalarType::kF32, {T, K});
      a.dbg_index = host_tensor(ScalarType::kI32, {T, K});
      return a;
    };
    MoeArgs own = with_outputs(m), given = with_outputs(m);
    given.router_z = g.router_out;
    given.router_in = poisoned(ScalarType::kBF16, {T, H});  // not read
    cuda().moe(own);
    cuda().moe(given);
    cuda().synchronize();
    expect_same_bits(r, "moe router_z probs" + sz, given.dbg_probs.data, own.dbg_probs.data, T * E, 4);
    expect_same_bits(r, "moe router_z experts" + sz, given.dbg_index.data, own.dbg_index.data, T * K, 4);
    expect_same_bits(r, "moe router_z weights" + sz, given.dbg_weights.data, own.dbg_weights.data, T * K, 4);
    const std::vector<uint16_t> a = u16(given.out), b = u16(own.out);
    expect_same_bits(r, "moe router_z out" + sz, a.data(), b.data(), T * H, 2);
  }
}

// The next layer's attention input norm from the FFN's residual junction (FfnResidualArgs::next_out)
// against the composed ops on the GPU (exact) and the CPU (libm_tol).
void check_next_norm(Reporter& r) {
  Data d("next_norm");
  const Tol libm_tol{1, 0.0, 1e-4, 0.9999, 1e-6};
  for (const int64_t T : {1, 37, 256}) {
    const int64_t H = 2816;
    const std::string sz = " T=" + std::to_string(T);
    Tensor h1 = d.bf16({T, H}, 3.0f), m1 = d.bf16({T, H}, 2.0f), m2 = d.bf16({T, H}, 0.2f);
    Tensor w1 = d.bf16({H}, 0.3f, 1.0f), w2 = d.bf16({H}, 0.3f, 1.0f), wf = d.bf16({H}, 0.3f, 1.0f);
    Tensor wn = d.bf16({H}, 0.3f, 1.0f);
    auto host = [&] { return host_tensor(ScalarType::kBF16, {T, H}); };
    auto dev = [&] { return poisoned(ScalarType::kBF16, {T, H}); };
    FfnResidualArgs c{h1, m1, m2, w1, w2, wf, 1e-6f, 0.37f, host(), Tensor{}, Tensor{}, Tensor{}, wn, host()};
    FfnResidualArgs g{up(h1), up(m1), up(m2), up(w1), up(w2), up(wf), 1e-6f, 0.37f, dev(), Tensor{}, Tensor{}, Tensor{},
                      up(wn), dev()};
    FfnResidualArgs gc = g;
    gc.out = dev();
    gc.next_out = dev();
    cpu().ffn_residual(c);
    cuda().ffn_residual(g);
    cuda().Backend::ffn_residual(gc);
    expect_bf16(r, "ffn_residual next_out (fused vs ops)" + sz, u16(g.next_out), u16(gc.next_out), exact_tol());
    expect_bf16(r, "ffn_residual out (fused vs ops)" + sz, u16(g.out), u16(gc.out), exact_tol());
    expect_bf16(r, "ffn_residual next_out (vs CPU)" + sz, u16(g.next_out), u16(c.next_out), libm_tol);
  }
}

// The residual junctions at every launch plan of residual_kernel.cuh (one, two and four words a
// thread; H / 8 not a multiple of 32: padding threads) and past it (H > 16384: the loop kernels),
// every optional output on, against the composed ops on the GPU: bit for bit.
void check_residual_plans(Reporter& r) {
  Data d("residual_plans");
  for (const int64_t H : {8, 1000, 2816, 4096, 12288, 20000}) {
    // T = 1,500: more rows than resident blocks (each block loops over rows, the next one loaded
    // ahead), with eps 0 and all-zero rows: infinite inverse norms, NaN rows bit for bit.
    for (const int64_t T : {3, 37, 1500}) {
      if (T * H > 20'000'000) continue;
      const int variant = T == 37 ? 1 : 0;  // 1: at least two words a thread (set_small_kernel_variant)
      Scoped<int> v(cuda::set_small_kernel_variant, variant);
      const std::string sz = " T=" + std::to_string(T) + " H=" + std::to_string(H) + " variant " + std::to_string(variant);
      const float root = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
      const float eps = T == 1500 ? 0.0f : 1e-6f;
      Tensor x = d.bf16({T, H}, 3.0f), o = d.bf16({T, H}, 0.5f), m1 = d.bf16({T, H}, 2.0f), m2 = d.bf16({T, H}, 0.2f);
      if (T == 1500) {
        std::fill_n(o.ptr<uint16_t>() + 700 * H, H, uint16_t{0});
        std::fill_n(m1.ptr<uint16_t>() + 900 * H, H, uint16_t{0});
        std::fill_n(m2.ptr<uint16_t>() + 1100 * H, H, uint16_t{0});
      }
      Tensor w[8];
      for (Tensor& t : w) t = up(d.bf16({H}, 0.3f, 1.0f));
      auto dev = [&] { return poisoned(ScalarType::kBF16, {T, H}); };
      AttnResidualArgs a{up(x), up(o), w[0], dev(), w[1], dev(), w[2], dev(), eps, dev(), w[3], dev(), root};
      AttnResidualArgs ac = a;
      ac.h1 = dev();
      ac.out_a = dev();
      ac.out_b = dev();
      ac.o_normed = dev();
      ac.router_out = dev();
      cuda().attn_residual(a);
      cuda().Backend::attn_residual(ac);
      expect_bf16(r, "attn_residual h1" + sz, u16(a.h1), u16(ac.h1), exact_tol());
      expect_bf16(r, "attn_residual out_a" + sz, u16(a.out_a), u16(ac.out_a), exact_tol());
      expect_bf16(r, "attn_residual out_b" + sz, u16(a.out_b), u16(ac.out_b), exact_tol());
      expect_bf16(r, "attn_residual o_normed" + sz, u16(a.o_normed), u16(ac.o_normed), exact_tol());
      expect_bf16(r, "attn_residual router_out" + sz, u16(a.router_out), u16(ac.router_out), exact_tol());
      FfnResidualArgs f{a.h1, up(m1), up(m2), w[4], w[5], w[6], eps, 0.37f, dev(), dev(), dev(), dev(), w[7], dev()};
      FfnResidualArgs fc = f;
      fc.out = dev();
      fc.m1n = dev();
      fc.m2n = dev();
      fc.f = dev();
      fc.next_out = dev();
      cuda().ffn_residual(f);
      cuda().Backend::ffn_residual(fc);
      expect_bf16(r, "ffn_residual out" + sz, u16(f.out), u16(fc.out), exact_tol());
      expect_bf16(r, "ffn_residual m1n" + sz, u16(f.m1n), u16(fc.m1n), exact_tol());
      expect_bf16(r, "ffn_residual m2n" + sz, u16(f.m2n), u16(fc.m2n), exact_tol());
      expect_bf16(r, "ffn_residual f" + sz, u16(f.f), u16(fc.f), exact_tol());
      expect_bf16(r, "ffn_residual next_out" + sz, u16(f.next_out), u16(fc.next_out), exact_tol());
    }
  }
}

// The fused top-k + grouping kernel against the top-k and grouping kernels it replaces, output by
// output (the MoE check above cannot see the order of the pairs within an expert): random logits,
// ties, one expert in every token's top-k, and T from 1 to 2048 (R past the tile list's threshold);
// also with the pairs placed by the second kernel (set_route_split_placement).
void check_moe_grouping(Reporter& r) {
  Data d("moe_grouping");
  const cuda::Context& ctx = cuda::context_of(cuda());
  struct G {
    int64_t T, E, K;
    bool skewed;
  };
  for (const G g : {G{1, 128, 8, false}, G{37, 8, 2, false}, G{256, 128, 8, false}, G{256, 128, 8, true},
                    G{1024, 128, 8, false}, G{2048, 128, 8, true}, G{77, 200, 6, false}, G{50, 32, 32, false},
                    G{300, 64, 3, true}}) {
    const std::string name = "grouping T=" + std::to_string(g.T) + " E=" + std::to_string(g.E) + " k=" +
                             std::to_string(g.K) + (g.skewed ? " skewed" : "");
    const int64_t T = g.T, E = g.E, K = g.K, R = T * K;
    Tensor lh = d.bf16({T, E}, 2.0f);
    uint16_t* l = lh.ptr<uint16_t>();
    for (int64_t t = 0; t < T; ++t) {
      if (t % 3 == 0) l[t * E + E - 1] = l[t * E + 1];  // a tie
      if (g.skewed) l[t * E + E / 2] = f32_to_bf16(9.0f);
    }
    Tensor logits = up(lh), pes = up(d.bf16_uniform({E}, 0.5f, 1.5f));
    const cuda::GroupedPlan plan = cuda::grouped_moe_plan(R, E);
    const int64_t n_tiles = plan.max_tiles;
    struct Out {
      Tensor top_idx, top_w, order, offsets, pairs, tiles;
    };
    auto outputs = [&] {
      return Out{poisoned(ScalarType::kI32, {T, K}), poisoned(ScalarType::kF32, {T, K}), poisoned(ScalarType::kI32, {T, K}),
                 poisoned(ScalarType::kI32, {E + 1}), poisoned(ScalarType::kI32, {R}),
                 poisoned(ScalarType::kI32, {4 * std::max<int64_t>(n_tiles, 1)})};
    };
    Out o = outputs(), n = outputs(), n2 = outputs(), n3 = outputs();
    auto tiles_of = [&](Out& x) { return n_tiles > 0 ? x.tiles.ptr<int32_t>() : nullptr; };
    {
      Scoped<bool> off(cuda::set_fused_moe_routing, false);
      cuda::launch_moe_topk(logits.ptr<uint16_t>(), T, E, K, pes.ptr<uint16_t>(), nullptr, o.top_idx.ptr<int32_t>(),
                            o.top_w.ptr<float>(), o.order.ptr<int32_t>(), ctx.stream);
      cuda::launch_moe_group(o.top_idx.ptr<int32_t>(), R, E, plan, o.offsets.ptr<int32_t>(), o.pairs.ptr<int32_t>(),
                             tiles_of(o), ctx.stream);
    }
    const int64_t scratch_n = cuda::moe_route_group_scratch(T, E, K);
    if (scratch_n == 0) {
      r.fail(name + ": the fused kernel refuses the shape");
      continue;
    }
    Tensor scratch = cuda().alloc(ScalarType::kI32, {scratch_n});
    {
      Scoped<bool> last_block(cuda::set_route_split_placement, false);  // n, n2: the pairs placed by the last block
      for (int rep = 0; rep < 2; ++rep)  // twice: the ticket must be back at zero after a launch
        cuda::launch_moe_route_group(logits.ptr<uint16_t>(), T, E, K, pes.ptr<uint16_t>(), nullptr, n.top_idx.ptr<int32_t>(),
                                     n.top_w.ptr<float>(), n.order.ptr<int32_t>(), n.offsets.ptr<int32_t>(),
                                     n.pairs.ptr<int32_t>(), tiles_of(n), n_tiles, plan.tile_rows,
                                     scratch.ptr<int32_t>(), ctx.ticket, ctx.stream);
      {
        Scoped<int> v(cuda::set_small_kernel_variant, 2);  // the earlier launch shape (sixteen tokens a block)
        cuda::launch_moe_route_group(logits.ptr<uint16_t>(), T, E, K, pes.ptr<uint16_t>(), nullptr, n2.top_idx.ptr<int32_t>(),
                                     n2.top_w.ptr<float>(), n2.order.ptr<int32_t>(), n2.offsets.ptr<int32_t>(),
                                     n2.pairs.ptr<int32_t>(), tiles_of(n2), n_tiles, plan.tile_rows,
                                     scratch.ptr<int32_t>(), ctx.ticket, ctx.stream);
      }
    }
    {
      Scoped<bool> split(cuda::set_route_split_placement, true);  // the pairs placed by a second kernel
      cuda::launch_moe_route_group(logits.ptr<uint16_t>(), T, E, K, pes.ptr<uint16_t>(), nullptr, n3.top_idx.ptr<int32_t>(),
                                   n3.top_w.ptr<float>(), n3.order.ptr<int32_t>(), n3.offsets.ptr<int32_t>(),
                                   n3.pairs.ptr<int32_t>(), tiles_of(n3), n_tiles, plan.tile_rows,
                                   scratch.ptr<int32_t>(), ctx.ticket, ctx.stream);
    }
    cuda().synchronize();
    auto same = [&](const char* what, const Tensor& a, const Tensor& b) {
      const std::vector<int32_t> x = i32(a), y = i32(b);
      expect_same_bits(r, name + " " + what, x.data(), y.data(), static_cast<int64_t>(x.size()), 4);
    };
    same("experts", n.top_idx, o.top_idx);
    same("weights", n.top_w, o.top_w);
    same("order", n.order, o.order);
    same("offsets", n.offsets, o.offsets);
    same("pairs", n.pairs, o.pairs);
    if (n_tiles > 0) same("tiles", n.tiles, o.tiles);
    same("pairs (variant 2)", n2.pairs, o.pairs);
    same("offsets (variant 2)", n2.offsets, o.offsets);
    same("order (variant 2)", n2.order, o.order);
    if (n_tiles > 0) same("tiles (variant 2)", n2.tiles, o.tiles);
    same("pairs (split placement)", n3.pairs, o.pairs);
    same("offsets (split placement)", n3.offsets, o.offsets);
    same("weights (split placement)", n3.top_w, o.top_w);
    if (n_tiles > 0) same("tiles (split placement)", n3.tiles, o.tiles);
  }
}

}  // namespace

std::vector<Case> small_kernel_cases() {
  return {
      {"qkv_prologue", check_qkv_prologue},
      {"moe_routing", check_moe_routing},
      {"moe_grouping", check_moe_grouping},
      {"router_input", check_router_input},
      {"next_norm", check_next_norm},
      {"residual_plans", check_residual_plans},
  };
}

void small_kernel_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                        const std::function<void(const char*, double)>& row) {
  Backend& be = cuda();
  auto bf = [&](std::initializer_list<int64_t> dims, uint64_t seed, float std, float mean = 0.0f) {
    Tensor t = be.alloc(ScalarType::kBF16, dims);
    be.fill_normal(t, seed, mean, std);
    return t;
  };
  // The attention prologue at the 26B-A4B shapes: sliding layers (Hq 16, Hkv 8, D 256) and full K=V
  // layers (Hq 16, Hkv 2, D 512), the op sequence against the fused kernel.
  for (int64_t T : {256, 1024, 4096}) {
    std::vector<int32_t> pos(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(1000 + i);
    for (bool full : {false, true}) {
      const int64_t Hq = 16, Hkv = full ? 2 : 8, D = full ? 512 : 256;
      const RopeParams rope = full ? RopeParams{RopeType::kProportional, 1e6, 0.25} : RopeParams{RopeType::kDefault, 10000.0, 1.0};
      QkvPrologueArgs a;
      a.q = bf({T, Hq, D}, 40, 1.0f);
      a.k = bf({T, Hkv, D}, 41, 1.0f);
      a.v = bf({T, Hkv, D}, 42, 1.0f);
      a.k_eq_v = full;
      a.q_norm = bf({D}, 43, 0.1f, 1.0f);
      a.k_norm = bf({D}, 44, 0.1f, 1.0f);
      a.positions = be.upload(host_i32(pos));
      a.inv_freq = be.upload(host_f32(rope_inv_freq(rope, static_cast<int>(D))));
      for (bool fused : {false, true}) {
        Scoped<bool> sw(cuda::set_fused_qkv_prologue, fused);
        const std::string what = "qkv prologue T=" + std::to_string(T) + (full ? " full K=V D=512" : " sliding D=256") +
                                 (fused ? " (fused)" : " (ops)");
        row(what.c_str(), time_ms([&] { be.qkv_prologue(a); }));
      }
      {  // the earlier kernel (set_small_kernel_variant(2): a block a token, a warp a head row)
        Scoped<int> earlier(cuda::set_small_kernel_variant, 2);
        const std::string what = "qkv prologue T=" + std::to_string(T) + (full ? " full K=V D=512" : " sliding D=256") +
                                 " (fused, a warp a row)";
        row(what.c_str(), time_ms([&] { be.qkv_prologue(a); }));
      }
    }
  }
  // The MoE routing kernels alone (top-k, combine) at E 128, k 8, H 2816, earlier against new, and the
  // whole MoE block with each.
  const cuda::Context& ctx = cuda::context_of(be);
  const int64_t H = 2816, I = 704, E = 128, K = 8;
  for (int64_t T : {256, 1024, 4096}) {  // batch 1, 4 and 16
    Tensor logits = bf({T, E}, 50, 2.0f), pes = bf({E}, 51, 0.1f, 1.0f);
    Tensor top_idx = be.alloc(ScalarType::kI32, {T, K}), order = be.alloc(ScalarType::kI32, {T, K});
    Tensor top_w = be.alloc(ScalarType::kF32, {T, K});
    Tensor y = bf({T * K, H}, 52, 1.0f), out = be.alloc(ScalarType::kBF16, {T, H});
    auto topk = [&] {
      cuda::launch_moe_topk(logits.ptr<uint16_t>(), T, E, K, pes.ptr<uint16_t>(), nullptr, top_idx.ptr<int32_t>(),
                            top_w.ptr<float>(), order.ptr<int32_t>(), ctx.stream);
    };
    const cuda::GroupedPlan plan = cuda::grouped_moe_plan(T * K, E);
    const int64_t n_tiles = plan.max_tiles;
    Tensor offsets = be.alloc(ScalarType::kI32, {E + 1}), pairs = be.alloc(ScalarType::kI32, {T * K});
    Tensor tiles = be.alloc(ScalarType::kI32, {4 * std::max<int64_t>(n_tiles, 1)});
    Tensor scratch = be.alloc(ScalarType::kI32, {std::max<int64_t>(cuda::moe_route_group_scratch(T, E, K), 1)});
    int32_t* tiles_ptr = n_tiles > 0 ? tiles.ptr<int32_t>() : nullptr;
    for (int form : {0, 1, 2}) {  // the earlier kernels, the fused one, the fused one with split placement
      const bool fused = form > 0;
      Scoped<bool> sw(cuda::set_fused_moe_routing, fused);
      Scoped<bool> split(cuda::set_route_split_placement, form == 2);
      const std::string suffix = std::string(" T=") + std::to_string(T) +
                                 (form == 0 ? " (earlier)" : form == 1 ? " (new)" : " (new, split placement)");
      row(("moe top-k E=128 k=8" + suffix).c_str(), time_ms(topk));
      row(("moe top-k + grouping" + suffix).c_str(), time_ms([&] {
            if (fused) {
              cuda::launch_moe_route_group(logits.ptr<uint16_t>(), T, E, K, pes.ptr<uint16_t>(), nullptr,
                                           top_idx.ptr<int32_t>(), top_w.ptr<float>(), order.ptr<int32_t>(),
                                           offsets.ptr<int32_t>(), pairs.ptr<int32_t>(), tiles_ptr, n_tiles,
                                           plan.tile_rows, scratch.ptr<int32_t>(), ctx.ticket, ctx.stream);
            } else {
              topk();
              cuda::launch_moe_group(top_idx.ptr<int32_t>(), T * K, E, plan, offsets.ptr<int32_t>(), pairs.ptr<int32_t>(),
                                     tiles_ptr, ctx.stream);
            }
          }));
      topk();  // a valid order for the combine
      row(("moe combine H=2816 k=8" + suffix).c_str(), time_ms([&] {
            cuda::launch_moe_combine(y.ptr<uint16_t>(), order.ptr<int32_t>(), T, K, H, out.ptr<uint16_t>(), ctx.stream);
          }));
    }
    {  // the attention's residual junction, alone and also writing the router's input
      Tensor x = bf({T, H}, 60, 1.0f), o = bf({T, H}, 61, 1.0f), w = bf({H}, 62, 0.1f, 1.0f);
      Tensor h1 = be.alloc(ScalarType::kBF16, {T, H}), oa = be.alloc(ScalarType::kBF16, {T, H});
      Tensor ob = be.alloc(ScalarType::kBF16, {T, H}), z = be.alloc(ScalarType::kBF16, {T, H});
      AttnResidualArgs ra{x, o, w, h1, w, oa, w, ob, 1e-6f, Tensor{}, Tensor{}, Tensor{}, 1.0f};
      row(("attn_residual T=" + std::to_string(T)).c_str(), time_ms([&] { be.attn_residual(ra); }));
      ra.router_scale = w;
      ra.router_out = z;
      row(("attn_residual T=" + std::to_string(T) + " + router input").c_str(), time_ms([&] { be.attn_residual(ra); }));
      FfnResidualArgs rf{h1, x, o, w, w, w, 1e-6f, 0.5f, oa, Tensor{}, Tensor{}, Tensor{}, Tensor{}, Tensor{}};
      row(("ffn_residual T=" + std::to_string(T)).c_str(), time_ms([&] { be.ffn_residual(rf); }));
      rf.next_norm = w;
      rf.next_out = ob;
      row(("ffn_residual T=" + std::to_string(T) + " + next input norm").c_str(), time_ms([&] { be.ffn_residual(rf); }));
      {  // the junctions' other launch shape (tuning.h set_small_kernel_variant)
        Scoped<int> v(cuda::set_small_kernel_variant, 1);
        row(("attn_residual T=" + std::to_string(T) + " + router input (two words a thread)").c_str(),
            time_ms([&] { be.attn_residual(ra); }));
        row(("ffn_residual T=" + std::to_string(T) + " + next input norm (two words a thread)").c_str(),
            time_ms([&] { be.ffn_residual(rf); }));
      }
      row(("rmsnorm T=" + std::to_string(T) + " H=2816 (what they replace)").c_str(),
          time_ms([&] { be.rmsnorm(x, &w, 1e-6f, z); }));
    }
    MoeArgs m;
    m.router_in = bf({T, H}, 53, 1.0f);
    m.expert_in = bf({T, H}, 54, 1.0f);
    m.router_scale = bf({H}, 55, 0.1f, 1.0f);
    m.router_proj = bf({E, H}, 56, 1.0f);
    m.per_expert_scale = pes;
    m.gate_up = bf({E, 2 * I, H}, 57, 0.02f);
    m.down = bf({E, H, I}, 58, 0.04f);
    m.top_k = static_cast<int>(K);
    m.out = be.alloc(ScalarType::kBF16, {T, H});
    for (bool fused : {false, true}) {
      Scoped<bool> sw(cuda::set_fused_moe_routing, fused);
      const std::string what = "moe block T=" + std::to_string(T) + (fused ? " (new routing)" : " (earlier routing)");
      row(what.c_str(), time_ms([&] { be.moe(m); }));
    }
    m.router_z = bf({T, H}, 59, 0.02f);
    row(("moe block T=" + std::to_string(T) + " (new routing, router input given)").c_str(), time_ms([&] { be.moe(m); }));
  }
  // The launch shapes of set_small_kernel_variant side by side (0: default, 1: the alternative, 2: the
  // earlier shapes), per call: the mean of 20 back-to-back calls (the rows above time one call and its
  // synchronisation, mostly launch latency at these sizes).
  auto per_call = [&](const std::function<void()>& fn) {
    return time_ms([&] {
             for (int i = 0; i < 20; ++i) fn();
           }) /
           20.0;
  };
  for (int64_t T : {256, 1024, 4096}) {
    const std::string t = " T=" + std::to_string(T);
    Tensor x = bf({T, H}, 70, 1.0f), o = bf({T, H}, 71, 1.0f), w = bf({H}, 72, 0.1f, 1.0f);
    Tensor h1 = be.alloc(ScalarType::kBF16, {T, H}), oa = be.alloc(ScalarType::kBF16, {T, H});
    Tensor ob = be.alloc(ScalarType::kBF16, {T, H}), z = be.alloc(ScalarType::kBF16, {T, H});
    AttnResidualArgs ra{x, o, w, h1, w, oa, w, ob, 1e-6f, Tensor{}, w, z, 1.0f};
    FfnResidualArgs rf{h1, x, o, w, w, w, 1e-6f, 0.5f, oa, Tensor{}, Tensor{}, Tensor{}, w, ob};
    Tensor logits = bf({T, E}, 73, 2.0f), pes = bf({E}, 74, 0.1f, 1.0f);
    Tensor top_idx = be.alloc(ScalarType::kI32, {T, K}), order = be.alloc(ScalarType::kI32, {T, K});
    Tensor top_w = be.alloc(ScalarType::kF32, {T, K});
    Tensor y = bf({T * K, H}, 75, 1.0f), out = be.alloc(ScalarType::kBF16, {T, H});
    const cuda::GroupedPlan plan = cuda::grouped_moe_plan(T * K, E);
    Tensor offsets = be.alloc(ScalarType::kI32, {E + 1}), pairs = be.alloc(ScalarType::kI32, {T * K});
    Tensor tiles = be.alloc(ScalarType::kI32, {4 * std::max<int64_t>(plan.max_tiles, 1)});
    Tensor scratch = be.alloc(ScalarType::kI32, {std::max<int64_t>(cuda::moe_route_group_scratch(T, E, K), 1)});
    std::vector<int32_t> pos(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(1000 + i);
    // The attention prologue as the model runs it: from the fused q|k|v projection (sliding: 32 head
    // rows of 256; full: K=V, 18 of 512).
    QkvPrologueArgs q;
    q.qkv = bf({T, 32 * 256}, 76, 1.0f);
    q.q = be.alloc(ScalarType::kBF16, {T, 16, 256});
    q.k = be.alloc(ScalarType::kBF16, {T, 8, 256});
    q.v = be.alloc(ScalarType::kBF16, {T, 8, 256});
    q.q_norm = bf({256}, 79, 0.1f, 1.0f);
    q.k_norm = bf({256}, 80, 0.1f, 1.0f);
    q.positions = be.upload(host_i32(pos));
    q.inv_freq = be.upload(host_f32(rope_inv_freq(RopeParams{RopeType::kDefault, 10000.0, 1.0}, 256)));
    QkvPrologueArgs qf;
    qf.qkv = bf({T, 18 * 512}, 81, 1.0f);
    qf.q = be.alloc(ScalarType::kBF16, {T, 16, 512});
    qf.k = be.alloc(ScalarType::kBF16, {T, 2, 512});
    qf.v = be.alloc(ScalarType::kBF16, {T, 2, 512});
    qf.k_eq_v = true;
    qf.q_norm = bf({512}, 82, 0.1f, 1.0f);
    qf.k_norm = bf({512}, 83, 0.1f, 1.0f);
    qf.positions = q.positions;
    qf.inv_freq = be.upload(host_f32(rope_inv_freq(RopeParams{RopeType::kProportional, 1e6, 0.25}, 512)));
    // The dense MLP's activation (gelu_mul_halves of the fused gate|up projection, I = 2112).
    Tensor gu = bf({T, 2 * 2112}, 84, 1.0f), act = be.alloc(ScalarType::kBF16, {T, 2112});
    auto route = [&] {
      cuda::launch_moe_route_group(logits.ptr<uint16_t>(), T, E, K, pes.ptr<uint16_t>(), nullptr, top_idx.ptr<int32_t>(),
                                   top_w.ptr<float>(), order.ptr<int32_t>(), offsets.ptr<int32_t>(), pairs.ptr<int32_t>(),
                                   plan.max_tiles > 0 ? tiles.ptr<int32_t>() : nullptr, plan.max_tiles, plan.tile_rows,
                                   scratch.ptr<int32_t>(), ctx.ticket, ctx.stream);
    };
    route();  // a valid order for the combine
    for (int variant : {0, 1, 2}) {
      Scoped<int> v(cuda::set_small_kernel_variant, variant);
      const std::string vs = " (variant " + std::to_string(variant) + ", per call)";
      row(("attn_residual + router input" + t + vs).c_str(), per_call([&] { be.attn_residual(ra); }));
      row(("ffn_residual + next input norm" + t + vs).c_str(), per_call([&] { be.ffn_residual(rf); }));
      if (variant != 1) {  // the qkv prologue: the token-loop kernel (0), the row kernel (2)
        row(("qkv prologue sliding D=256 fused input" + t + vs).c_str(), per_call([&] { be.qkv_prologue(q); }));
        row(("qkv prologue full K=V D=512 fused input" + t + vs).c_str(), per_call([&] { be.qkv_prologue(qf); }));
      }
      if (variant != 1)  // from T ~ 1,000 the table kernel (0), the vectorised one (2)
        row(("gelu_mul_halves I=2112" + t + vs).c_str(), per_call([&] { be.gelu_mul_halves(gu, act); }));
      row(("moe top-k + grouping (fused)" + t + vs).c_str(), per_call(route));
      row(("moe combine H=2816 k=8" + t + vs).c_str(), per_call([&] {
            cuda::launch_moe_combine(y.ptr<uint16_t>(), order.ptr<int32_t>(), T, K, H, out.ptr<uint16_t>(), ctx.stream);
          }));
    }
  }
}

}  // namespace dgemma::gpu_test
