#include "model/diffusion_gemma.h"

#include <algorithm>
#include <cmath>

#include "util/bf16.h"
#include "util/error.h"

namespace dgemma {

std::vector<float> rope_inv_freq(const RopeParams& rope, int head_dim) {
  std::vector<float> inv(static_cast<size_t>(head_dim / 2), 0.0f);
  const float base = static_cast<float>(rope.theta);
  if (rope.type == RopeType::kDefault) {
    // 1 / base^(2j/dim) with dim = head_dim * partial_rotary_factor, in fp32 as torch computes it.
    const int dim = static_cast<int>(head_dim * rope.partial_rotary_factor);
    for (int j = 0; j < dim / 2; ++j)
      inv[j] = 1.0f / std::pow(base, static_cast<float>(2 * j) / static_cast<float>(dim));
  } else {
    // Proportional: int(factor * head_dim // 2) live frequencies with exponent denominator head_dim;
    // the remaining ones are 0 (those dims pass through: cos 1, sin 0).
    const int angles = static_cast<int>(rope.partial_rotary_factor * head_dim / 2);
    for (int j = 0; j < angles; ++j)
      inv[j] = 1.0f / std::pow(base, static_cast<float>(2 * j) / static_cast<float>(head_dim));
  }
  return inv;
}

DiffusionGemma::DiffusionGemma(ModelConfig config, ModelWeights weights, Backend& backend)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(backend) {
  const TextConfig& t = config_.text;
  embed_scale_ = round_bf16(static_cast<float>(std::sqrt(static_cast<double>(t.hidden_size))));
  router_root_ = static_cast<float>(std::pow(static_cast<double>(t.hidden_size), -0.5));
  auto upload_freq = [&](const RopeParams& rope, int head_dim) {
    std::vector<float> inv = rope_inv_freq(rope, head_dim);
    Tensor host = host_tensor(ScalarType::kF32, {static_cast<int64_t>(inv.size())});
    std::copy(inv.begin(), inv.end(), host.ptr<float>());
    return backend_.upload(host);
  };
  inv_freq_sliding_ = upload_freq(t.rope_sliding, t.head_dim);
  int full_dim = t.global_head_dim;
  for (const auto& L : t.layers)
    if (L.type == LayerType::kFull) full_dim = L.head_dim;
  inv_freq_full_ = upload_freq(t.rope_full, full_dim);
}

Tensor DiffusionGemma::embed_inputs(std::span<ForwardItem> items, int64_t total) {
  const int64_t H = config_.text.hidden_size;
  const float eps = static_cast<float>(config_.text.rms_norm_eps);
  Tensor ids_host = host_tensor(ScalarType::kI32, {total});
  int64_t off = 0;
  for (const auto& it : items) {
    std::copy(it.tokens.begin(), it.tokens.end(), ids_host.ptr<int32_t>() + off);
    off += it.length();
  }
  Tensor ids = backend_.alloc(ScalarType::kI32, {total});
  backend_.from_host(ids, ids_host.data);
  // Device-resident tokens (the denoising canvases) are copied in on the device.
  off = 0;
  for (const auto& it : items) {
    if (!it.token_ids.empty()) backend_.copy(ids.rows(off, off + it.length()), it.token_ids);
    off += it.length();
  }
  Tensor x = backend_.alloc(ScalarType::kBF16, {total, H});
  backend_.embed(ids, weights_.embed, embed_scale_, x);

  // Decoder inputs: x0 = rmsnorm0(E[c]*scale + SC-MLP(pre_norm(soft))), SC = 0 at the first step.
  off = 0;
  for (auto& it : items) {
    const int64_t n = it.length();
    if (it.kind == ForwardItem::Kind::kDenoise) {
      Tensor e = x.rows(off, off + n);
      if (!it.soft_embeds.empty()) {
        const int64_t S = config_.text.self_conditioning_size;
        Tensor u = backend_.alloc(ScalarType::kBF16, {n, H});
        backend_.rmsnorm(it.soft_embeds, &weights_.sc_pre_norm, eps, u);
        Tensor g = backend_.alloc(ScalarType::kBF16, {n, S});
        Tensor up = backend_.alloc(ScalarType::kBF16, {n, S});
        backend_.matmul(u, weights_.sc_gate, g);
        backend_.matmul(u, weights_.sc_up, up);
        backend_.gelu_mul(g, up, g);
        Tensor sc = backend_.alloc(ScalarType::kBF16, {n, H});
        backend_.matmul(g, weights_.sc_down, sc);
        dump("sc.mlp_out", sc);
        backend_.add(e, sc, e);
      }
      backend_.rmsnorm(e, nullptr, eps, e);
      dump("decoder.input", e);
    }
    off += n;
  }
  return x;
}

void DiffusionGemma::forward(std::span<ForwardItem> items, const KvStorage& kv) {
  const TextConfig& t = config_.text;
  const int64_t H = t.hidden_size;
  const float eps = static_cast<float>(t.rms_norm_eps);
  DG_CHECK(kv.layers.size() == static_cast<size_t>(t.num_hidden_layers) && kv.page_size > 0);
  std::vector<int64_t> offsets;
  int64_t total = 0, table_entries = 0;
  for (auto& it : items) {
    DG_CHECK(it.length() > 0 && (it.token_ids.empty() || it.tokens.empty()) && it.kv.cached >= 0);
    DG_CHECK(it.token_ids.empty() || (it.token_ids.type == ScalarType::kI32 && it.token_ids.device == backend_.device()));
    if (it.kind == ForwardItem::Kind::kEncode) {
      // The tables must cover the positions written.
      const int64_t last_page = (it.kv.cached + it.length() - 1) / kv.page_size;
      for (int g = 0; g < kKvGroups; ++g)
        DG_CHECK(it.kv.tables[g].empty() || static_cast<int64_t>(it.kv.tables[g].size()) > last_page);
    } else {
      DG_CHECK(!it.logits.empty() && it.logits.dim(0) == it.length());
    }
    for (const auto& tb : it.kv.tables) table_entries += static_cast<int64_t>(tb.size());
    offsets.push_back(total);
    total += it.length();
  }
  offsets.push_back(total);
  if (total == 0) return;

  // Absolute positions: an item's tokens start right after what its sequence has in the cache.
  Tensor pos_host = host_tensor(ScalarType::kI32, {total});
  for (size_t i = 0; i < items.size(); ++i)
    for (int64_t j = 0; j < offsets[i + 1] - offsets[i]; ++j)
      pos_host.ptr<int32_t>()[offsets[i] + j] = static_cast<int32_t>(items[i].kv.cached + j);
  Tensor positions = backend_.alloc(ScalarType::kI32, {total});
  backend_.from_host(positions, pos_host.data);

  // Every item's page tables go up in one copy; each item reads its own rows.
  std::vector<std::array<Tensor, kKvGroups>> tables(items.size());
  {
    Tensor host = host_tensor(ScalarType::kI32, {std::max<int64_t>(table_entries, 1)});
    Tensor dev = backend_.alloc(ScalarType::kI32, {std::max<int64_t>(table_entries, 1)});
    int64_t off = 0;
    std::vector<std::array<std::pair<int64_t, int64_t>, kKvGroups>> ranges(items.size());
    for (size_t i = 0; i < items.size(); ++i)
      for (int g = 0; g < kKvGroups; ++g) {
        const auto& tb = items[i].kv.tables[g];
        std::copy(tb.begin(), tb.end(), host.ptr<int32_t>() + off);
        ranges[i][g] = {off, off + static_cast<int64_t>(tb.size())};
        off += static_cast<int64_t>(tb.size());
      }
    backend_.from_host(dev, host.data);
    for (size_t i = 0; i < items.size(); ++i)
      for (int g = 0; g < kKvGroups; ++g)
        if (ranges[i][g].second > ranges[i][g].first) tables[i][g] = dev.rows(ranges[i][g].first, ranges[i][g].second);
  }

  Tensor x = embed_inputs(items, total);
  for (int li = 0; li < t.num_hidden_layers; ++li) layer(li, items, offsets, positions, kv, tables, x);

  for (size_t i = 0; i < items.size(); ++i) {
    ForwardItem& it = items[i];
    if (it.kind == ForwardItem::Kind::kEncode) continue;
    // Final norm and the tied LM head; the soft-cap is applied by the sampler (in fp32).
    Tensor h = x.rows(offsets[i], offsets[i + 1]);
    Tensor hn = backend_.alloc(ScalarType::kBF16, {h.dim(0), H});
    backend_.rmsnorm(h, &weights_.final_norm, eps, hn);
    dump("final_norm", hn);
    backend_.matmul(hn, weights_.embed, it.logits);
    dump("logits", it.logits);
  }
}

void DiffusionGemma::layer(int li, std::span<ForwardItem> items, const std::vector<int64_t>& offsets,
                           const Tensor& positions, const KvStorage& kv,
                           const std::vector<std::array<Tensor, kKvGroups>>& tables, Tensor& x) {
  const TextConfig& t = config_.text;
  const LayerWeights& w = weights_.layers[li];
  const LayerSpec& L = w.spec;
  const int64_t T = x.dim(0), H = t.hidden_size, Hq = t.num_attention_heads, D = L.head_dim, Hkv = L.num_kv_heads;
  const float eps = static_cast<float>(t.rms_norm_eps);
  const std::string p = "layer" + std::to_string(li) + ".";
  auto bf16 = [&](std::initializer_list<int64_t> dims) { return backend_.alloc(ScalarType::kBF16, dims); };
  dump(p + "input", x);

  // --- attention -----------------------------------------------------------------------------
  Tensor a = bf16({T, H});
  backend_.rmsnorm(x, &w.input_norm, eps, a);
  dump(p + "attn_norm", a);
  Tensor q = bf16({T, Hq, D}), k = bf16({T, Hkv, D});
  backend_.matmul(a, w.q_proj, q);
  backend_.matmul(a, w.k_proj, k);
  dump(p + "q_proj", q);
  dump(p + "k_proj", k);
  Tensor v = bf16({T, Hkv, D});
  if (L.k_eq_v) {
    backend_.copy(v, k);  // K=V: V is the raw K projection (before k_norm and RoPE)
  } else {
    backend_.matmul(a, w.v_proj, v);
    dump(p + "v_proj", v);
  }
  backend_.rmsnorm(q, &w.q_norm, eps, q);
  backend_.rmsnorm(k, &w.k_norm, eps, k);
  backend_.rmsnorm(v, nullptr, eps, v);
  dump(p + "q_norm", q);
  dump(p + "k_norm", k);
  dump(p + "v_norm", v);
  const Tensor& inv_freq = L.type == LayerType::kSliding ? inv_freq_sliding_ : inv_freq_full_;
  backend_.rope(q, positions, inv_freq);
  backend_.rope(k, positions, inv_freq);

  Tensor attn = bf16({T, Hq, D});
  const KvLayerPages& pages = kv.layers[li];
  const int group = static_cast<int>(kv_group_of(L));
  for (size_t i = 0; i < items.size(); ++i) {
    ForwardItem& it = items[i];
    const int64_t b = offsets[i], e = offsets[i + 1];
    // Visible cache: every cached token (full layers) or the most recent window-1 (sliding layers).
    const int64_t cached = it.kv.cached;
    const int64_t visible = L.type == LayerType::kSliding ? std::min<int64_t>(cached, sliding_keep(config_)) : cached;
    AttentionArgs args;
    args.q = q.rows(b, e);
    args.k_pages = pages.k;
    args.v_pages = pages.v;
    args.page_table = tables[i][group];
    args.cache_first = cached - visible;
    args.cache_len = visible;
    args.k_new = k.rows(b, e);
    args.v_new = v.rows(b, e);
    args.causal = it.kind == ForwardItem::Kind::kEncode;
    args.window = (args.causal && L.type == LayerType::kSliding) ? t.sliding_window : 0;
    args.out = attn.rows(b, e);
    DG_CHECK(visible == 0 || !args.page_table.empty());
    backend_.attention(args);
    if (it.kind == ForwardItem::Kind::kEncode) {
      DG_CHECK(!args.page_table.empty());
      backend_.kv_write(pages.k, args.page_table, cached, args.k_new);
      backend_.kv_write(pages.v, args.page_table, cached, args.v_new);
    }
  }
  dump(p + "attn_heads", attn);
  Tensor o = bf16({T, H});
  backend_.matmul(attn.reshape({T, Hq * D}), w.o_proj, o);
  dump(p + "attn_out", o);
  // h1 = x + post_attn_norm(o), and the two FFN inputs normed from it (one fused op).
  Tensor h1 = bf16({T, H}), d = bf16({T, H}), xe = bf16({T, H});
  {
    AttnResidualArgs r;
    r.x = x;
    r.o = o;
    r.post_norm = w.post_attn_norm;
    r.h1 = h1;
    r.norm_a = w.pre_ff_norm;
    r.out_a = d;
    r.norm_b = w.pre_ff_norm2;
    r.out_b = xe;
    r.eps = eps;
    if (dump_) r.o_normed = bf16({T, H});
    backend_.attn_residual(r);
    dump(p + "post_attn_norm", r.o_normed);
  }
  dump(p + "mlp_norm", d);
  dump(p + "moe_norm", xe);

  // --- dense MLP and MoE in parallel on h1 ------------------------------------------------------
  const int64_t I = t.intermediate_size;
  Tensor g = bf16({T, I}), u = bf16({T, I});
  backend_.matmul(d, w.mlp_gate, g);
  backend_.matmul(d, w.mlp_up, u);
  backend_.gelu_mul(g, u, g);
  Tensor m1 = bf16({T, H});
  backend_.matmul(g, w.mlp_down, m1);
  dump(p + "mlp_out", m1);

  MoeArgs m;
  m.router_in = h1;
  m.expert_in = xe;
  m.router_scale = w.router_scale;
  m.router_proj = w.router_proj;
  m.per_expert_scale = w.per_expert_scale;
  m.gate_up = w.experts_gate_up;
  m.down = w.experts_down;
  m.top_k = t.top_k_experts;
  m.eps = eps;
  m.out = bf16({T, H});
  if (dump_) {
    m.dbg_probs = host_tensor(ScalarType::kF32, {T, t.num_experts});
    m.dbg_weights = host_tensor(ScalarType::kF32, {T, t.top_k_experts});
    m.dbg_index = host_tensor(ScalarType::kI32, {T, t.top_k_experts});
  }
  backend_.moe(m);
  if (dump_) {
    dump(p + "router_probs", m.dbg_probs);
    dump(p + "router_weights", m.dbg_weights);
    dump(p + "router_index", m.dbg_index);
  }
  dump(p + "moe_out", m.out);

  // x = (h1 + post_ff_norm(post_ff_norm1(m1) + post_ff_norm2(moe))) * the layer's scalar, one fused op
  // per run of items of one kind (encoder and decoder rows have their own scalar).
  Tensor m1n, m2n, f;
  if (dump_) {
    m1n = bf16({T, H});
    m2n = bf16({T, H});
    f = bf16({T, H});
  }
  auto rows_of = [](const Tensor& t, int64_t b, int64_t e) { return t.empty() ? t : t.rows(b, e); };
  for (size_t i = 0; i < items.size();) {
    size_t j = i + 1;
    while (j < items.size() && items[j].kind == items[i].kind) ++j;
    const int64_t b = offsets[i], e = offsets[j];
    FfnResidualArgs r;
    r.h1 = h1.rows(b, e);
    r.m1 = m1.rows(b, e);
    r.m2 = m.out.rows(b, e);
    r.norm1 = w.post_ff_norm1;
    r.norm2 = w.post_ff_norm2;
    r.norm_f = w.post_ff_norm;
    r.eps = eps;
    r.scale = items[i].kind == ForwardItem::Kind::kEncode ? w.layer_scalar_encoder : w.layer_scalar_decoder;
    r.out = x.rows(b, e);
    r.m1n = rows_of(m1n, b, e);
    r.m2n = rows_of(m2n, b, e);
    r.f = rows_of(f, b, e);
    backend_.ffn_residual(r);
    i = j;
  }
  dump(p + "mlp_post_norm", m1n);
  dump(p + "moe_post_norm", m2n);
  dump(p + "ffn_post_norm", f);
  dump(p + "output", x);
}

void DiffusionGemma::soft_embeddings(const Tensor& probs, const Tensor& out) {
  backend_.matmul_kn(probs, weights_.embed, out);
  backend_.scale(out, embed_scale_, out);
}

void DiffusionGemma::one_hot_soft_embeddings(const Tensor& ids, const Tensor& out) {
  backend_.embed(ids, weights_.embed, embed_scale_, out);
}

}  // namespace dgemma
