// Checks of the fused small kernels of a layer against the sequences they replace: the attention
// prologue (layer/qkv_prologue.cu: q/k norms + RoPE, v's unit norm; the token-loop kernel and, for more head
// rows than its block takes, the row kernel) against the rmsnorm / rope / copy ops on the GPU
// (bit-identical) and the CPU's composition; the MoE routing (the register top-k fused with the
// grouping, moe/route.cu) against the routing rules applied on the host (the softmax within an ulp;
// the experts, weights, order, offsets, pairs and tile list from the device's probabilities bit for
// bit) on random, tied, skewed and NaN router logits; the router's input computed by the attention's
// residual junction and the next layer's input norm by the FFN's; the residual junctions at every
// launch plan. Plus `dgemma_gpu_check --bench` rows, the sequences against the fused kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/moe/combine.cuh"
#include "backend/cuda/moe/grouped.cuh"
#include "backend/cuda/moe/route.cuh"
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
                            // more head rows than the token-loop kernel's block: the row kernel
                            QkvShape{33, 64, 8, 256, false, sliding}, QkvShape{5, 32, 4, 512, true, full},
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
    QkvPrologueArgs unfused = gpu_args(), fused = gpu_args();
    cuda().Backend::qkv_prologue(unfused);  // the composed ops: rmsnorm, rope and copy launches
    cuda().qkv_prologue(fused);
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

// The residual junctions at every launch plan of layer/residual_kernel.cuh (one word a thread up to
// H = 3072, two up to 6144, four up to 16384; H / 8 not a multiple of 32: padding threads) and past it
// (H > 16384: residual_fusable refuses, the backend composes the ops), every optional output on,
// against the composed ops on the GPU: bit for bit.
void check_residual_plans(Reporter& r) {
  Data d("residual_plans");
  for (const int64_t H : {8, 1000, 2816, 4096, 12288, 20000}) {
    // T = 1,500: more rows than resident blocks (each block loops over rows, the next one loaded
    // ahead), with eps 0 and all-zero rows: infinite inverse norms, NaN rows bit for bit.
    for (const int64_t T : {3, 37, 1500}) {
      if (T * H > 20'000'000) continue;
      const std::string sz = " T=" + std::to_string(T) + " H=" + std::to_string(H);
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

// The routing on the host, from the device's probabilities [T, E] and the experts' scales: per token
// the top K (the largest probability first, ties to the lower expert; only NaN left: the lowest
// untaken expert), the weights p / (sum of the K in slot order) * scale in fp32, the slots by
// ascending expert.
struct RouteRef {
  std::vector<int32_t> top_idx, order;
  std::vector<float> top_w;
};
RouteRef route_rules(const std::vector<float>& probs, const std::vector<uint16_t>& pes, int64_t T, int64_t E, int64_t K) {
  RouteRef ref;
  ref.top_idx.resize(static_cast<size_t>(T * K));
  ref.order.resize(ref.top_idx.size());
  ref.top_w.resize(ref.top_idx.size());
  for (int64_t t = 0; t < T; ++t) {
    const float* p = probs.data() + t * E;
    std::vector<char> taken(static_cast<size_t>(E), 0);
    std::vector<int32_t> sel(static_cast<size_t>(K));
    for (int64_t k = 0; k < K; ++k) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e)
        if (!taken[e] && !std::isnan(p[e]) && (best < 0 || p[e] > p[best])) best = e;
      if (best < 0)
        for (int64_t e = E - 1; e >= 0; --e)
          if (!taken[e]) best = e;
      taken[best] = 1;
      sel[k] = static_cast<int32_t>(best);
    }
    float wsum = 0.0f;
    for (int64_t k = 0; k < K; ++k) wsum += p[sel[k]];
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = sel[k];
      ref.top_idx[t * K + k] = e;
      ref.top_w[t * K + k] = (p[e] / wsum) * bf16_to_f32(pes[static_cast<size_t>(e)]);
      int64_t rank = 0;
      for (int64_t j = 0; j < K; ++j) rank += sel[j] < e || (sel[j] == e && j < k);
      ref.order[t * K + rank] = static_cast<int32_t>(k);
    }
  }
  return ref;
}

// The softmax of one token's bf16 logits as the kernel computes it: the exps in double rounded to
// fp32, summed in index order in fp32 (fmax ignores NaN, as the kernel's reduction).
std::vector<float> softmax_row(const uint16_t* l, int64_t E) {
  float mx = -INFINITY;
  for (int64_t e = 0; e < E; ++e) mx = std::fmax(mx, bf16_to_f32(l[e]));
  std::vector<float> p(static_cast<size_t>(E));
  float sum = 0.0f;
  for (int64_t e = 0; e < E; ++e) {
    p[e] = static_cast<float>(std::exp(static_cast<double>(bf16_to_f32(l[e]) - mx)));
    sum += p[e];
  }
  for (float& v : p) v /= sum;
  return p;
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0; }

// The fused top-k + grouping kernel (launch_moe_route_group) on given logits: random, ties, one
// expert in every token's top-k, NaN tokens (every logit NaN), E of one to eight register slots a lane
// (8 .. 256 experts), K up to 32 and T from 1 to 2048 (R past the tile list's threshold). The
// probabilities within an ulp of the host's softmax (the device's double exp may differ in its last
// bit); from the device's probabilities, the experts, weights and slot order bit for bit, and from its
// experts the offsets, pairs and tile list (group_by_expert). Launched twice: the ticket the last block
// resets must serve the next launch, with the same outputs.
void check_moe_routing(Reporter& r) {
  Data d("moe_routing");
  const cuda::Context& ctx = cuda::context_of(cuda());
  struct G {
    int64_t T, E, K;
    bool skewed, nan;
  };
  for (const G g : {G{1, 128, 8, false, false}, G{37, 8, 2, false, false}, G{37, 8, 2, false, true},
                    G{256, 128, 8, false, false}, G{256, 128, 8, true, false}, G{1024, 128, 8, false, false},
                    G{2048, 128, 8, true, false}, G{19, 128, 8, false, true}, G{77, 200, 6, false, false},
                    G{45, 48, 5, false, false}, G{50, 32, 32, false, false}, G{9, 256, 8, false, false},
                    G{300, 64, 3, true, false}}) {
    const std::string name = "routing T=" + std::to_string(g.T) + " E=" + std::to_string(g.E) + " k=" +
                             std::to_string(g.K) + (g.skewed ? " skewed" : "") + (g.nan ? " NaN" : "");
    const int64_t T = g.T, E = g.E, K = g.K, R = T * K;
    Tensor lh = d.bf16({T, E}, 2.0f);
    uint16_t* l = lh.ptr<uint16_t>();
    for (int64_t t = 0; t < T; ++t) {
      if (t % 3 == 0) l[t * E + E - 1] = l[t * E + 1];  // a tie
      if (g.skewed) l[t * E + E / 2] = f32_to_bf16(9.0f);
      if (g.nan && t % 5 == 0) std::fill_n(l + t * E, E, uint16_t{0x7fc0});
    }
    const Tensor pes_h = d.bf16_uniform({E}, 0.5f, 1.5f);
    const Tensor logits = up(lh), pes = up(pes_h);
    const cuda::GroupedPlan plan = cuda::grouped_moe_plan(R, E, MoeKernel::kAuto, ctx.hopper());
    const int64_t n_tiles = plan.max_tiles;
    const int64_t scratch_n = cuda::moe_route_group_scratch(T, E, K);
    if (scratch_n == 0) {
      r.fail(name + ": the routing kernel refuses the shape");
      continue;
    }
    Tensor scratch = cuda().alloc(ScalarType::kI32, {scratch_n});
    struct Out {
      Tensor probs, top_idx, top_w, order, offsets, pairs, tiles;
    };
    auto launch = [&] {
      Out o{poisoned(ScalarType::kF32, {T, E}),  poisoned(ScalarType::kI32, {T, K}),  poisoned(ScalarType::kF32, {T, K}),
            poisoned(ScalarType::kI32, {T, K}),  poisoned(ScalarType::kI32, {E + 1}), poisoned(ScalarType::kI32, {R}),
            poisoned(ScalarType::kI32, {4 * std::max<int64_t>(n_tiles, 1)})};
      cuda::launch_moe_route_group(logits.ptr<uint16_t>(), T, E, K, pes.ptr<uint16_t>(), o.probs.ptr<float>(),
                                   o.top_idx.ptr<int32_t>(), o.top_w.ptr<float>(), o.order.ptr<int32_t>(),
                                   o.offsets.ptr<int32_t>(), o.pairs.ptr<int32_t>(),
                                   n_tiles > 0 ? o.tiles.ptr<int32_t>() : nullptr, n_tiles, plan.tile_rows,
                                   scratch.ptr<int32_t>(), ctx.ticket, ctx.stream);
      return o;
    };
    const Out first = launch(), second = launch();
    cuda().synchronize();
    const std::vector<float> probs = f32(first.probs);
    int64_t off_ulp = 0;
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<float> want = softmax_row(l + t * E, E);
      for (int64_t e = 0; e < E; ++e) {
        const float got = probs[static_cast<size_t>(t * E + e)];
        if (same_float(got, want[e])) continue;
        if (std::isnan(got) || std::isnan(want[e]) || std::nextafter(want[e], got) != got) {
          r.fail(name + ": token " + std::to_string(t) + " expert " + std::to_string(e) + " probability " +
                 std::to_string(got) + ", host " + std::to_string(want[e]));
          t = T;
          break;
        }
        ++off_ulp;
      }
    }
    r.note(name + ": " + std::to_string(off_ulp) + " probabilities one ulp from the host's");
    std::vector<uint16_t> pes_v(pes_h.ptr<uint16_t>(), pes_h.ptr<uint16_t>() + E);
    const RouteRef want = route_rules(probs, pes_v, T, E, K);
    const std::vector<int32_t> idx = i32(first.top_idx);
    if (idx != want.top_idx) r.fail(name + ": experts differ from the rules on the device's probabilities");
    if (i32(first.order) != want.order) r.fail(name + ": slot order differs");
    const std::vector<float> w = f32(first.top_w);
    for (size_t i = 0; i < w.size(); ++i)
      if (!same_float(w[i], want.top_w[i])) {
        r.fail(name + ": weight " + std::to_string(i) + " is " + std::to_string(w[i]) + ", rules " +
               std::to_string(want.top_w[i]));
        break;
      }
    const Grouping grouping = group_by_expert(idx, E, plan.tile_rows, n_tiles);
    if (i32(first.offsets) != grouping.offsets) r.fail(name + ": offsets differ from the stable grouping");
    if (i32(first.pairs) != grouping.pairs) r.fail(name + ": pairs differ from the stable grouping");
    if (n_tiles > 0 && i32(first.tiles) != grouping.tiles) r.fail(name + ": tile list differs");
    if (i32(second.pairs) != grouping.pairs || i32(second.top_idx) != idx || i32(second.tiles) != i32(first.tiles))
      r.fail(name + ": a second launch differs (the ticket)");
    if (g.nan)  // the NaN tokens take experts 0 .. K-1 (the lowest untaken index each round)
      for (int64_t t = 0; t < T; t += 5)
        for (int64_t k = 0; k < K; ++k)
          if (idx[static_cast<size_t>(t * K + k)] != k) {
            r.fail(name + ": NaN token " + std::to_string(t) + " slot " + std::to_string(k) + " took expert " +
                   std::to_string(idx[static_cast<size_t>(t * K + k)]));
            t = T;
            break;
          }
  }
}

}  // namespace

std::vector<Case> small_kernel_cases() {
  return {
      {"qkv_prologue", check_qkv_prologue},
      {"moe_routing", check_moe_routing},
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
  // Per call: the mean of 20 back-to-back calls (one call and its synchronisation is mostly launch
  // latency at these sizes).
  auto per_call = [&](const std::function<void()>& fn) {
    return time_ms([&] {
             for (int i = 0; i < 20; ++i) fn();
           }) /
           20.0;
  };
  const cuda::Context& ctx = cuda::context_of(be);
  const int64_t H = 2816, I = 704, E = 128, K = 8;
  for (int64_t T : {256, 1024, 4096}) {  // batch 1, 4 and 16
    const std::string t = " T=" + std::to_string(T);
    std::vector<int32_t> pos(static_cast<size_t>(T));
    for (int64_t i = 0; i < T; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(1000 + i);
    // The attention prologue at the 26B-A4B shapes from the fused q|k|v projection (sliding: 32 head
    // rows of 256; full: K=V, 18 of 512), the fused kernel against the op sequence it replaces.
    for (bool full : {false, true}) {
      const int64_t Hq = 16, Hkv = full ? 2 : 8, D = full ? 512 : 256;
      const RopeParams rope = full ? RopeParams{RopeType::kProportional, 1e6, 0.25} : RopeParams{RopeType::kDefault, 10000.0, 1.0};
      QkvPrologueArgs a;
      a.qkv = bf({T, (Hq + (full ? 1 : 2) * Hkv) * D}, 40, 1.0f);
      a.q = be.alloc(ScalarType::kBF16, {T, Hq, D});
      a.k = be.alloc(ScalarType::kBF16, {T, Hkv, D});
      a.v = be.alloc(ScalarType::kBF16, {T, Hkv, D});
      a.k_eq_v = full;
      a.q_norm = bf({D}, 43, 0.1f, 1.0f);
      a.k_norm = bf({D}, 44, 0.1f, 1.0f);
      a.positions = be.upload(host_i32(pos));
      a.inv_freq = be.upload(host_f32(rope_inv_freq(rope, static_cast<int>(D))));
      const std::string what = "qkv prologue" + t + (full ? " full K=V D=512" : " sliding D=256");
      row((what + " (fused, per call)").c_str(), per_call([&] { be.qkv_prologue(a); }));
      row((what + " (ops, per call)").c_str(), per_call([&] { be.Backend::qkv_prologue(a); }));
    }
    // The dense MLP's activation (gelu_mul_halves of the fused gate|up projection, I = 2112).
    {
      Tensor gu = bf({T, 2 * 2112}, 84, 1.0f), act = be.alloc(ScalarType::kBF16, {T, 2112});
      row(("gelu_mul_halves I=2112" + t + " (per call)").c_str(),
          per_call([&] { be.gelu_mul_halves(gu, act, {}); }));
    }
    // The MoE routing fused with the grouping, and the combine, at E 128, k 8, H 2816.
    Tensor logits = bf({T, E}, 50, 2.0f), pes = bf({E}, 51, 0.1f, 1.0f);
    Tensor top_idx = be.alloc(ScalarType::kI32, {T, K}), order = be.alloc(ScalarType::kI32, {T, K});
    Tensor top_w = be.alloc(ScalarType::kF32, {T, K});
    Tensor y = bf({T * K, H}, 52, 1.0f), out = be.alloc(ScalarType::kBF16, {T, H});
    const cuda::GroupedPlan plan = cuda::grouped_moe_plan(T * K, E, MoeKernel::kAuto, ctx.hopper());
    Tensor offsets = be.alloc(ScalarType::kI32, {E + 1}), pairs = be.alloc(ScalarType::kI32, {T * K});
    Tensor tiles = be.alloc(ScalarType::kI32, {4 * std::max<int64_t>(plan.max_tiles, 1)});
    Tensor scratch = be.alloc(ScalarType::kI32, {std::max<int64_t>(cuda::moe_route_group_scratch(T, E, K), 1)});
    auto route = [&] {
      cuda::launch_moe_route_group(logits.ptr<uint16_t>(), T, E, K, pes.ptr<uint16_t>(), nullptr, top_idx.ptr<int32_t>(),
                                   top_w.ptr<float>(), order.ptr<int32_t>(), offsets.ptr<int32_t>(), pairs.ptr<int32_t>(),
                                   plan.max_tiles > 0 ? tiles.ptr<int32_t>() : nullptr, plan.max_tiles, plan.tile_rows,
                                   scratch.ptr<int32_t>(), ctx.ticket, ctx.stream);
    };
    route();  // a valid order for the combine
    row(("moe top-k + grouping E=128 k=8" + t + " (per call)").c_str(), per_call(route));
    row(("moe combine H=2816 k=8" + t + " (per call)").c_str(), per_call([&] {
          cuda::launch_moe_combine(y.ptr<uint16_t>(), order.ptr<int32_t>(), T, K, H, out.ptr<uint16_t>(), ctx.stream);
        }));
    {  // the residual junctions, alone and also writing the router's input / the next input norm
      Tensor x = bf({T, H}, 60, 1.0f), o = bf({T, H}, 61, 1.0f), w = bf({H}, 62, 0.1f, 1.0f);
      Tensor h1 = be.alloc(ScalarType::kBF16, {T, H}), oa = be.alloc(ScalarType::kBF16, {T, H});
      Tensor ob = be.alloc(ScalarType::kBF16, {T, H}), z = be.alloc(ScalarType::kBF16, {T, H});
      AttnResidualArgs ra{x, o, w, h1, w, oa, w, ob, 1e-6f, Tensor{}, Tensor{}, Tensor{}, 1.0f};
      row(("attn_residual" + t + " (per call)").c_str(), per_call([&] { be.attn_residual(ra); }));
      ra.router_scale = w;
      ra.router_out = z;
      row(("attn_residual + router input" + t + " (per call)").c_str(), per_call([&] { be.attn_residual(ra); }));
      FfnResidualArgs rf{h1, x, o, w, w, w, 1e-6f, 0.5f, oa, Tensor{}, Tensor{}, Tensor{}, Tensor{}, Tensor{}};
      row(("ffn_residual" + t + " (per call)").c_str(), per_call([&] { be.ffn_residual(rf); }));
      rf.next_norm = w;
      rf.next_out = ob;
      row(("ffn_residual + next input norm" + t + " (per call)").c_str(), per_call([&] { be.ffn_residual(rf); }));
      row(("rmsnorm H=2816" + t + " (what they replace, per call)").c_str(),
          per_call([&] { be.rmsnorm(x, &w, 1e-6f, z); }));
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
    row(("moe block" + t).c_str(), time_ms([&] { be.moe(m); }));
    m.router_z = bf({T, H}, 59, 0.02f);
    row(("moe block" + t + " (router input given)").c_str(), time_ms([&] { be.moe(m); }));
  }
}

}  // namespace dgemma::gpu_test
