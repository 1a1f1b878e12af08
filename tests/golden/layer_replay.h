#pragma once
// Teacher-forced replay of one decoder layer: each linear block (q / k projections, o projection,
// dense MLP, MoE) is run on the reference's own recorded input and compared with the reference's
// recorded output. A free-running forward compounds every rounding difference layer after layer
// (and FP8-dynamic's per-token activation quantisation amplifies them: a value that lands on the
// other side of an E4M3 rounding boundary moves by up to 2^-4 instead of 2^-8); the replay isolates
// one block, so its bound stays the bf16 one and it checks the quantised maths itself (weights,
// scales, activation quantisation) against the reference's.
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/weights.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma::golden {

struct ReplayCase {
  std::string name;  // the reference intermediate compared against, e.g. "layer2.q_proj"
  std::vector<float> got;
};

// `golden(key)` returns the reference intermediate `layer<li>.<key>` as floats (bf16 values, rows
// in order). Runs the blocks of layer `li` on `be` and returns their outputs next to the names of
// the reference outputs they must equal.
inline std::vector<ReplayCase> replay_layer(Backend& be, const ModelConfig& c, const LayerWeights& w, int li,
                                            const std::function<std::vector<float>(const std::string&)>& golden) {
  const TextConfig& t = c.text;
  const int64_t H = t.hidden_size, Hq = t.num_attention_heads, D = w.spec.head_dim, Hkv = w.spec.num_kv_heads;
  const std::string p = "layer" + std::to_string(li) + ".";
  auto input = [&](const std::string& key, std::initializer_list<int64_t> dims) {
    const std::vector<float> v = golden(p + key);
    Tensor h = host_tensor(ScalarType::kBF16, dims);
    DG_CHECK(static_cast<int64_t>(v.size()) == h.numel());
    for (size_t i = 0; i < v.size(); ++i) h.ptr<uint16_t>()[i] = f32_to_bf16(v[i]);
    return be.upload(h);
  };
  auto floats = [&](const Tensor& x) {
    std::vector<uint16_t> raw(static_cast<size_t>(x.numel()));
    be.to_host(x, raw.data());
    std::vector<float> out(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) out[i] = bf16_to_f32(raw[i]);
    return out;
  };
  const int64_t T = static_cast<int64_t>(golden(p + "attn_norm").size()) / H;
  std::vector<ReplayCase> out;

  // The fused q | k | v and gate | up projections (model/fused_weights.h), as the model runs them.
  const Tensor a = input("attn_norm", {T, H});
  Tensor q = be.alloc(ScalarType::kBF16, {T, Hq * D}), k = be.alloc(ScalarType::kBF16, {T, Hkv * D});
  DG_CHECK(!w.qkv_proj.empty() && !w.mlp_gate_up.empty());
  Tensor qkv = be.alloc(ScalarType::kBF16, {T, w.qkv_proj.rows()});
  be.matmul(a, w.qkv_proj, qkv);
  be.copy_columns(q, qkv, 0);
  be.copy_columns(k, qkv, Hq * D);
  out.push_back({p + "q_proj", floats(q)});
  out.push_back({p + "k_proj", floats(k)});

  Tensor o = be.alloc(ScalarType::kBF16, {T, H});
  be.matmul(input("attn_heads", {T, Hq * D}), w.o_proj, o);
  out.push_back({p + "attn_out", floats(o)});

  const int64_t I = t.intermediate_size;
  const Tensor d = input("mlp_norm", {T, H});
  Tensor gu = be.alloc(ScalarType::kBF16, {T, 2 * I}), g = be.alloc(ScalarType::kBF16, {T, I});
  be.matmul(d, w.mlp_gate_up, gu);
  be.gelu_mul_halves(gu, g, {});
  Tensor m1 = be.alloc(ScalarType::kBF16, {T, H});
  be.matmul(g, w.mlp_down, m1);
  out.push_back({p + "mlp_out", floats(m1)});

  // The MoE: router on h1 = input + post_attn_norm (the residual after attention, bf16 add as the
  // model), experts on moe_norm.
  Tensor h1 = be.alloc(ScalarType::kBF16, {T, H});
  be.add(input("input", {T, H}), input("post_attn_norm", {T, H}), h1);
  MoeArgs m;
  m.router_in = h1;
  m.expert_in = input("moe_norm", {T, H});
  m.router_scale = w.router_scale;
  m.router_proj = w.router_proj;
  m.per_expert_scale = w.per_expert_scale;
  m.gate_up = w.experts_gate_up;
  m.down = w.experts_down;
  m.top_k = t.top_k_experts;
  m.eps = static_cast<float>(t.rms_norm_eps);
  m.out = be.alloc(ScalarType::kBF16, {T, H});
  be.moe(m);
  out.push_back({p + "moe_out", floats(m.out)});
  return out;
}

}  // namespace dgemma::golden
