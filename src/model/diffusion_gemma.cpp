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

DiffusionGemma::DiffusionGemma(ModelConfig config, ModelWeights weights, Backend& backend, TensorParallelRank tp)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(backend), tp_(tp) {
  const TextConfig& t = config_.text;
  if (tp_.collective == nullptr) tp_.plan = ShardPlan{};
  DG_CHECK(tp_.collective == nullptr || (tp_.collective->size() == tp_.plan.size && tp_.collective->rank() == tp_.plan.rank));
  if (sharded()) validate_tensor_parallel(config_, tp_.plan.size);
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

namespace {

uint64_t address_of(const Tensor& t) { return t.empty() ? 0 : static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t.data)); }

}  // namespace

void put_address(std::vector<int32_t>& words, int64_t at, const Tensor& t) {
  const uint64_t v = address_of(t);
  words.at(static_cast<size_t>(at)) = static_cast<int32_t>(static_cast<uint32_t>(v));
  words.at(static_cast<size_t>(at) + 1) = static_cast<int32_t>(static_cast<uint32_t>(v >> 32));
}

ForwardInputs DiffusionGemma::encode_inputs(std::span<const ForwardItem> items, int64_t table_words) const {
  const TextConfig& t = config_.text;
  ForwardInputs in;
  int64_t entries = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const ForwardItem& it = items[i];
    DG_CHECK(it.length() > 0 && (it.token_ids.empty() || it.tokens.empty()) && it.kv.cached >= 0);
    DG_CHECK(it.token_ids.empty() || (it.token_ids.type == ScalarType::kI32 && it.token_ids.device == backend_.device()));
    if (it.kind == ForwardItem::Kind::kDenoise) {
      DG_CHECK(!it.logits.empty() && it.logits.dim(0) == it.length() && it.logits.dim(1) == logits_columns());
      DG_CHECK(in.denoise.empty() || it.length() == items[static_cast<size_t>(in.denoise.front())].length());
      DG_CHECK(it.soft_embeds.empty() || (it.soft_embeds.type == ScalarType::kBF16 && it.soft_embeds.device == backend_.device() &&
                                          it.soft_embeds.numel() == it.length() * t.hidden_size));
      in.denoise.push_back(static_cast<int64_t>(i));
    } else {
      DG_CHECK(in.denoise.empty());  // encode items first, then the denoise items
    }
    for (const auto& tb : it.kv.tables) entries += static_cast<int64_t>(tb.size());
    in.offsets.push_back(in.total);
    in.total += it.length();
  }
  in.offsets.push_back(in.total);
  DG_CHECK(in.total <= INT32_MAX);
  DG_CHECK(table_words == 0 || table_words >= entries);
  in.table_words = std::max<int64_t>(table_words > 0 ? table_words : entries, 1);
  const int64_t n = static_cast<int64_t>(items.size()), item_words = n * kAttentionItemFields;
  // Layout: ids, positions, tables, both groups' items, then the u64 address tables (8-byte aligned).
  in.ids_at = 0;
  in.positions_at = in.total;
  in.tables_at = 2 * in.total;
  in.items_at[0] = in.tables_at + in.table_words;
  in.items_at[1] = in.items_at[0] + item_words;
  const int64_t nd = static_cast<int64_t>(in.denoise.size());
  in.canvas_table_at = (in.items_at[1] + item_words + 1) / 2 * 2;
  in.soft_table_at = in.canvas_table_at + 2 * nd;
  in.words.assign(static_cast<size_t>(in.soft_table_at + 2 * nd), 0);
  int32_t* w = in.words.data();

  // Token ids (device canvases are gathered over theirs later) and absolute positions: an item's
  // tokens start right after what its sequence has in the cache.
  std::vector<std::array<std::pair<int64_t, int64_t>, kKvGroups>> ranges(items.size());
  int64_t at = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const ForwardItem& it = items[i];
    const int64_t o = in.offsets[i];
    std::copy(it.tokens.begin(), it.tokens.end(), w + in.ids_at + o);
    for (int64_t j = 0; j < it.length(); ++j) w[in.positions_at + o + j] = static_cast<int32_t>(it.kv.cached + j);
    for (int g = 0; g < kKvGroups; ++g) {
      const auto& tb = it.kv.tables[g];
      std::copy(tb.begin(), tb.end(), w + in.tables_at + at);
      ranges[i][g] = {at, at + static_cast<int64_t>(tb.size())};
      at += static_cast<int64_t>(tb.size());
    }
  }
  // Both KV groups' attention items; the launch plans see plan_cached where it is larger.
  for (int g = 0; g < kKvGroups; ++g) {
    const bool sliding = g == static_cast<int>(KvGroup::kSliding);
    // Visible cache: every cached token (full layers) or the most recent window-1 (sliding layers).
    auto visible_of = [&](int64_t cached) { return sliding ? std::min<int64_t>(cached, sliding_keep(config_)) : cached; };
    in.plan_items[g].reserve(items.size());
    in.host_items[g].reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      const ForwardItem& it = items[i];
      const int64_t cached = it.kv.cached, visible = visible_of(cached);
      DG_CHECK(visible == 0 || ranges[i][g].second > ranges[i][g].first);
      DG_CHECK(cached <= INT32_MAX && it.plan_cached <= INT32_MAX);
      AttentionItem a;
      a.q_first = static_cast<int32_t>(in.offsets[i]);
      a.q_len = static_cast<int32_t>(in.offsets[i + 1] - in.offsets[i]);
      a.cache_first = static_cast<int32_t>(cached - visible);
      a.cache_len = static_cast<int32_t>(visible);
      a.table_first = static_cast<int32_t>(ranges[i][g].first);
      a.table_len = static_cast<int32_t>(ranges[i][g].second - ranges[i][g].first);
      a.causal = it.kind == ForwardItem::Kind::kEncode ? 1 : 0;
      a.window = (a.causal && sliding) ? t.sliding_window : 0;
      std::copy_n(reinterpret_cast<const int32_t*>(&a), kAttentionItemFields, w + in.items_at[g] + i * kAttentionItemFields);
      in.host_items[g].push_back(a);
      if (it.plan_cached > cached) a.cache_len = static_cast<int32_t>(visible_of(it.plan_cached));
      in.plan_items[g].push_back(a);
    }
  }
  for (int64_t k = 0; k < nd; ++k) {
    const ForwardItem& it = items[static_cast<size_t>(in.denoise[static_cast<size_t>(k)])];
    // The device copies them in 16-byte words (Backend::gather_blocks).
    DG_CHECK(address_of(it.token_ids) % 16 == 0 && address_of(it.soft_embeds) % 16 == 0);
    put_address(in.words, in.canvas_table_at + 2 * k, it.token_ids);
    put_address(in.words, in.soft_table_at + 2 * k, it.soft_embeds);
  }
  return in;
}

Tensor DiffusionGemma::embed_inputs(std::span<ForwardItem> items, const ForwardInputs& in, const Tensor& block) {
  const int64_t H = config_.text.hidden_size;
  Tensor ids = block.rows(in.ids_at, in.ids_at + in.total);
  // Device-resident tokens (the denoising canvases) are gathered over their rows of the block.
  const int64_t nd = static_cast<int64_t>(in.denoise.size());
  if (nd > 0) {
    const int64_t first = in.offsets[static_cast<size_t>(in.denoise.front())];
    const int64_t C = items[static_cast<size_t>(in.denoise.front())].length();
    backend_.gather_blocks(block.rows(in.canvas_table_at, in.canvas_table_at + 2 * nd), nd, C * 4,
                           ids.rows(first, in.total), /*zero_missing=*/false);
  }
  Tensor x = backend_.alloc(ScalarType::kBF16, {in.total, H});
  if (sharded()) {
    // Each id's row lives on one rank; the others add -0 (exact).
    backend_.embed_shard(ids, weights_.embed, tp_.plan.split(config_.text.vocab_size).begin, config_.text.vocab_size,
                         embed_scale_, x);
    tp_.collective->all_reduce_sum(x);
  } else {
    backend_.embed(ids, weights_.embed, embed_scale_, x);
  }
  decoder_inputs(items, in, block, x);
  return x;
}

void DiffusionGemma::decoder_inputs(std::span<ForwardItem> items, const ForwardInputs& in, const Tensor& block,
                                    const Tensor& x) {
  // Decoder inputs: x0 = rmsnorm0(E[c]*scale + SC-MLP(pre_norm(soft))), every denoise row at once (the
  // ops are row-wise). A canvas's first step has no soft embeddings: its rows read zeros, whose SC-MLP
  // output is exactly +0 (rmsnorm of zeros is 0, the gated MLP of 0 is 0), so its x0 is
  // rmsnorm0(E[c]*scale) as the reference's, but for the sign of a zero (-0 + +0 = +0), which no later
  // op tells apart.
  const int64_t nd = static_cast<int64_t>(in.denoise.size());
  if (nd == 0) return;
  const int64_t H = config_.text.hidden_size;
  const float eps = static_cast<float>(config_.text.rms_norm_eps);
  const int64_t b = in.offsets[static_cast<size_t>(in.denoise.front())];
  const int64_t C = items[static_cast<size_t>(in.denoise.front())].length();
  Tensor e = x.rows(b, in.total);
  Tensor soft = backend_.alloc(ScalarType::kBF16, {nd * C, H});
  backend_.gather_blocks(block.rows(in.soft_table_at, in.soft_table_at + 2 * nd), nd, C * H * 2, soft,
                         /*zero_missing=*/true);
  Tensor u = backend_.alloc(ScalarType::kBF16, {nd * C, H});
  backend_.rmsnorm(soft, &weights_.sc_pre_norm, eps, u);
  Tensor sc = backend_.alloc(ScalarType::kBF16, {nd * C, H});
  gated_mlp(u, weights_.sc_gate_up, weights_.sc_gate, weights_.sc_up, weights_.sc_down, sc);
  for (int64_t k = 0; k < nd; ++k)
    if (!items[static_cast<size_t>(in.denoise[static_cast<size_t>(k)])].soft_embeds.empty())
      dump("sc.mlp_out", sc.rows(k * C, (k + 1) * C));
  backend_.add(e, sc, e);
  backend_.rmsnorm(e, nullptr, eps, e);
  for (int64_t k = 0; k < nd; ++k) dump("decoder.input", e.rows(k * C, (k + 1) * C));
}

void DiffusionGemma::forward(std::span<ForwardItem> items, const KvStorage& kv) {
  const ForwardInputs in = encode_inputs(items);
  Tensor block = backend_.alloc(ScalarType::kI32, {static_cast<int64_t>(in.words.size())});
  backend_.from_host(block, in.words.data());
  forward(items, kv, in, block);
}

void DiffusionGemma::forward(std::span<ForwardItem> items, const KvStorage& kv, const ForwardInputs& in,
                             const Tensor& block) {
  const TextConfig& t = config_.text;
  DG_CHECK(kv.layers.size() == static_cast<size_t>(t.num_hidden_layers) && kv.page_size > 0);
  DG_CHECK(in.offsets.size() == items.size() + 1 && block.type == ScalarType::kI32 &&
           block.numel() >= static_cast<int64_t>(in.words.size()));
  for (size_t i = 0; i < items.size(); ++i) {
    const ForwardItem& it = items[i];
    if (it.kind != ForwardItem::Kind::kEncode) continue;
    // The tables must cover the positions written.
    const int64_t last_page = (it.kv.cached + it.length() - 1) / kv.page_size;
    for (int g = 0; g < kKvGroups; ++g)
      DG_CHECK(it.kv.tables[g].empty() || static_cast<int64_t>(it.kv.tables[g].size()) > last_page);
  }
  if (in.total == 0) return;
  const Tensor positions = block.rows(in.positions_at, in.positions_at + in.total);

  // Each encode item's kv_write reads its own table rows, each layer's attention its group's items.
  std::vector<std::array<Tensor, kKvGroups>> tables(items.size());
  std::array<GroupAttention, kKvGroups> attention;
  for (int g = 0; g < kKvGroups; ++g) {
    attention[g].tables = block.rows(in.tables_at, in.tables_at + in.table_words);
    attention[g].items =
        block.rows(in.items_at[g], in.items_at[g] + static_cast<int64_t>(items.size()) * kAttentionItemFields);
    attention[g].host = in.host_items[g];
    attention[g].plan = in.plan_items[g];
    for (size_t i = 0; i < items.size(); ++i) {
      const AttentionItem& a = in.host_items[g][i];
      if (a.table_len > 0)
        tables[i][g] = block.rows(in.tables_at + a.table_first, in.tables_at + a.table_first + a.table_len);
    }
  }

  Tensor x = embed_inputs(items, in, block);
  Tensor normed;  // each layer's attention input norm, computed by the layer before it
  for (int li = 0; li < t.num_hidden_layers; ++li)
    layer(li, items, in.offsets, positions, kv, tables, attention, x, normed);

  lm_head(items, in.offsets, x);
}

void DiffusionGemma::lm_head(std::span<ForwardItem> items, const std::vector<int64_t>& offsets, const Tensor& x) {
  const int64_t H = config_.text.hidden_size;
  const float eps = static_cast<float>(config_.text.rms_norm_eps);
  // Final norm and the tied LM head; the soft-cap is applied by the sampler (in fp32). Denoise items
  // whose logits are consecutive rows of one buffer (the runner's step buffer) share one GEMM: the
  // norm is row-wise and every logits row is its own dot products, so each item's rows are what
  // its own GEMM would give (bit for bit on the CPU; the GPU's GEMM may tile a taller matrix
  // differently: fp32 summation order only).
  size_t i = 0;
  while (i < items.size()) {
    if (items[i].kind != ForwardItem::Kind::kDenoise) {
      ++i;
      continue;
    }
    // The run [i, j) of denoise items with adjacent logits.
    size_t j = i + 1;
    int64_t rows = items[i].logits.dim(0);
    while (j < items.size() && items[j].kind == ForwardItem::Kind::kDenoise &&
           items[j].logits.type == items[i].logits.type && items[j].logits.dim(1) == items[i].logits.dim(1) &&
           items[j].logits.data == static_cast<char*>(items[i].logits.data) +
                                       static_cast<size_t>(items[i].logits.dim(1) * rows) * scalar_size(items[i].logits.type)) {
      rows += items[j].logits.dim(0);
      ++j;
    }
    // Consecutive items: their hidden rows are adjacent in x too.
    DG_CHECK(offsets[j] - offsets[i] == rows);
    Tensor hn = backend_.alloc(ScalarType::kBF16, {rows, H});
    backend_.rmsnorm(x.rows(offsets[i], offsets[j]), &weights_.final_norm, eps, hn);
    Tensor logits = items[i].logits;
    logits.shape[0] = rows;  // the run's rows of the one buffer
    backend_.matmul(hn, weights_.embed, logits);
    int64_t r = 0;
    for (size_t k = i; k < j; ++k) {
      const int64_t n = items[k].length();
      dump("final_norm", hn.rows(r, r + n));
      if (!sharded()) dump("logits", items[k].logits);  // a rank holds its vocabulary columns only
      r += n;
    }
    i = j;
  }
}

void DiffusionGemma::layer(int li, std::span<ForwardItem> items, const std::vector<int64_t>& offsets,
                           const Tensor& positions, const KvStorage& kv,
                           const std::vector<std::array<Tensor, kKvGroups>>& tables,
                           const std::array<GroupAttention, kKvGroups>& attention, Tensor& x, Tensor& normed) {
  const TextConfig& t = config_.text;
  const LayerWeights& w = weights_.layers[li];
  const LayerSpec& L = w.spec;
  const int64_t T = x.dim(0), H = t.hidden_size, D = L.head_dim;
  // This rank's query and KV heads (all of them unsharded).
  const int64_t Hq = t.num_attention_heads / tp_.plan.size, Hkv = tp_.plan.kv_heads(L.num_kv_heads).size();
  const float eps = static_cast<float>(t.rms_norm_eps);
  const std::string p = "layer" + std::to_string(li) + ".";
  auto bf16 = [&](std::initializer_list<int64_t> dims) { return backend_.alloc(ScalarType::kBF16, dims); };
  // A rank's heads are a slice: dumped unsharded only (the names denote whole tensors).
  auto dump_heads = [&](const std::string& name, const Tensor& v) {
    if (!sharded()) dump(name, v);
  };
  dump(p + "input", x);

  // --- attention -----------------------------------------------------------------------------
  Tensor a = normed;
  if (a.empty()) {
    a = bf16({T, H});
    backend_.rmsnorm(x, &w.input_norm, eps, a);
  }
  dump(p + "attn_norm", a);
  // The q, k (and v) projections: one GEMM of the fused weight into [T, (Hq + Hkv (+ Hkv)) D] that the
  // prologue reads (or, with the parts stored in different formats, one GEMM each).
  Tensor q = bf16({T, Hq, D}), k = bf16({T, Hkv, D}), v = bf16({T, Hkv, D});
  Tensor qkv_out;
  if (!w.qkv_proj.empty()) {
    qkv_out = bf16({T, w.qkv_proj.rows()});
    DG_CHECK(w.qkv_proj.rows() == (Hq + (L.k_eq_v ? 1 : 2) * Hkv) * D);
    backend_.matmul(a, w.qkv_proj, qkv_out);
    if (dump_) {  // the dumps read the projections as their own tensors
      backend_.copy_columns(q, qkv_out, 0);
      backend_.copy_columns(k, qkv_out, Hq * D);
      if (!L.k_eq_v) backend_.copy_columns(v, qkv_out, (Hq + Hkv) * D);
    }
  } else {
    backend_.matmul(a, w.q_proj, q);
    backend_.matmul(a, w.k_proj, k);
    if (!L.k_eq_v) backend_.matmul(a, w.v_proj, v);
  }
  dump_heads(p + "q_proj", q);
  dump_heads(p + "k_proj", k);
  if (!L.k_eq_v) dump_heads(p + "v_proj", v);
  // q_norm + RoPE, k_norm + RoPE, v's unit norm (K=V: V is the raw K projection, before k_norm and
  // RoPE): one fused op, or the op-by-op sequence when the dumps want the pre-RoPE norms.
  QkvPrologueArgs qkv;
  qkv.q = q;
  qkv.k = k;
  qkv.v = v;
  if (!dump_) qkv.qkv = qkv_out;  // empty when the projections ran one by one
  qkv.k_eq_v = L.k_eq_v;
  qkv.q_norm = w.q_norm;
  qkv.k_norm = w.k_norm;
  qkv.positions = positions;
  qkv.inv_freq = L.type == LayerType::kSliding ? inv_freq_sliding_ : inv_freq_full_;
  qkv.eps = eps;
  if (dump_) {
    if (L.k_eq_v) backend_.copy(v, k);
    backend_.rmsnorm(q, &w.q_norm, eps, q);
    backend_.rmsnorm(k, &w.k_norm, eps, k);
    backend_.rmsnorm(v, nullptr, eps, v);
    dump_heads(p + "q_norm", q);
    dump_heads(p + "k_norm", k);
    dump_heads(p + "v_norm", v);
    backend_.rope(q, positions, qkv.inv_freq);
    backend_.rope(k, positions, qkv.inv_freq);
  } else {
    backend_.qkv_prologue(qkv);
  }
  qkv_out = qkv.qkv = Tensor();  // read by now (stream order): back to the allocator before attention

  Tensor attn = bf16({T, Hq, D});
  const KvLayerPages& pages = kv.layers[li];
  const int group = static_cast<int>(kv_group_of(L));
  // Encode items write their keys first (positions past every cache range of this layer's items, so
  // no item's attention reads them unless it follows the encode item in its sequence, as it should).
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].kind != ForwardItem::Kind::kEncode) continue;
    const Tensor& table = tables[i][group];
    DG_CHECK(!table.empty());
    backend_.kv_write(pages.k, table, items[i].kv.cached, k.rows(offsets[i], offsets[i + 1]));
    backend_.kv_write(pages.v, table, items[i].kv.cached, v.rows(offsets[i], offsets[i + 1]));
  }
  {
    const GroupAttention& ga = attention[group];
    AttentionBatchArgs args;
    args.q = q;
    args.k_pages = pages.k;
    args.v_pages = pages.v;
    args.page_tables = ga.tables;
    args.k_new = k;
    args.v_new = v;
    args.items = ga.items;
    args.host_items = ga.host;
    args.plan_items = ga.plan;
    args.out = attn;
    backend_.attention_batch(args);
  }
  dump_heads(p + "attn_heads", attn);
  Tensor heads = attn.reshape({T, Hq * D});
  if (sharded()) {
    heads = bf16({T, Hq * D * tp_.plan.size});
    tp_.collective->all_gather_last(attn.reshape({T, Hq * D}), heads);
  }
  Tensor o = bf16({T, H});
  linear_gathered(heads, w.o_proj, o);
  dump(p + "attn_out", o);
  // h1 = x + post_attn_norm(o), and the two FFN inputs and the router's input normed from it (one
  // fused op).
  Tensor h1 = bf16({T, H}), d = bf16({T, H}), xe = bf16({T, H});
  Tensor router_z = fused_norms_ ? bf16({T, H}) : Tensor{};
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
    if (fused_norms_) {
      r.router_scale = w.router_scale;
      r.router_root = router_root_;
      r.router_out = router_z;
    }
    if (dump_) r.o_normed = bf16({T, H});
    backend_.attn_residual(r);
    dump(p + "post_attn_norm", r.o_normed);
  }
  dump(p + "mlp_norm", d);
  dump(p + "moe_norm", xe);

  // --- dense MLP and MoE in parallel on h1 ------------------------------------------------------
  Tensor m1 = bf16({T, H});
  gated_mlp(d, w.mlp_gate_up, w.mlp_gate, w.mlp_up, w.mlp_down, m1);
  dump(p + "mlp_out", m1);

  MoeArgs m;
  m.router_in = h1;
  m.expert_in = xe;
  m.router_scale = w.router_scale;
  m.router_z = router_z;
  m.router_proj = w.router_proj;
  m.per_expert_scale = w.per_expert_scale;
  m.gate_up = w.experts_gate_up;
  m.down = w.experts_down;
  m.top_k = t.top_k_experts;
  m.eps = eps;
  if (sharded()) {
    m.expert_first = tp_.plan.split(t.num_experts).begin;
    m.collective = tp_.collective;
  }
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

  // x = (h1 + post_ff_norm(post_ff_norm1(m1) + post_ff_norm2(moe))) * the layer's scalar, and the
  // next layer's attention input norm of it: one fused op per run of items of one kind (encoder and
  // decoder rows have their own scalar).
  const bool has_next = fused_norms_ && li + 1 < t.num_hidden_layers;
  normed = has_next ? bf16({T, H}) : Tensor{};
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
    if (has_next) {
      r.next_norm = weights_.layers[li + 1].input_norm;
      r.next_out = normed.rows(b, e);
    }
    backend_.ffn_residual(r);
    i = j;
  }
  dump(p + "mlp_post_norm", m1n);
  dump(p + "moe_post_norm", m2n);
  dump(p + "ffn_post_norm", f);
  dump(p + "output", x);
}

void DiffusionGemma::linear_gathered(const Tensor& x, const Weight& w, const Tensor& out) {
  if (!sharded()) return backend_.matmul(x, w, out);
  Tensor part = backend_.alloc(ScalarType::kBF16, {x.dim(0), w.rows()});
  backend_.matmul(x, w, part);
  tp_.collective->all_gather_last(part, out);
}

void DiffusionGemma::gated_mlp(const Tensor& x, const Weight& gate_up, const Weight& gate, const Weight& up,
                               const Weight& down, const Tensor& out) {
  const int64_t T = x.dim(0);
  Tensor g;
  if (!gate_up.empty()) {  // one GEMM into [T, 2I], the two halves of each row multiplied
    const int64_t I = gate_up.rows() / 2;  // I: this rank's share of the width
    Tensor gu = backend_.alloc(ScalarType::kBF16, {T, 2 * I});
    backend_.matmul(x, gate_up, gu);
    g = backend_.alloc(ScalarType::kBF16, {T, I});
    backend_.gelu_mul_halves(gu, g);
  } else {
    const int64_t I = gate.rows();
    g = backend_.alloc(ScalarType::kBF16, {T, I});
    Tensor u = backend_.alloc(ScalarType::kBF16, {T, I});
    backend_.matmul(x, gate, g);
    backend_.matmul(x, up, u);
    backend_.gelu_mul(g, u, g);
  }
  const int64_t I = g.dim(1);
  if (sharded()) {
    Tensor all = backend_.alloc(ScalarType::kBF16, {T, I * tp_.plan.size});
    tp_.collective->all_gather_last(g, all);
    g = all;
  }
  linear_gathered(g, down, out);
}

void DiffusionGemma::sampler(SamplerArgs args) { sampler_batch(std::span<SamplerArgs>(&args, 1)); }

void DiffusionGemma::sampler_batch(std::span<SamplerArgs> canvases) {
  if (sharded())
    for (SamplerArgs& a : canvases) {
      a.vocab_first = tp_.plan.split(config_.text.vocab_size).begin;
      a.vocab_total = config_.text.vocab_size;
      a.collective = tp_.collective;
    }
  backend_.sampler_batch(canvases);
}

void DiffusionGemma::sampler_batch_encoded(std::span<SamplerArgs> canvases, const Tensor& encoded) {
  if (!sharded()) return backend_.sampler_batch_encoded(canvases, encoded);
  // The vocabulary-sharded sampler reads its host arguments (only the CPU backend has one).
  DG_CHECK(backend_.encoded_sampler_bytes(static_cast<int>(canvases.size())) == 0);
  sampler_batch(canvases);
}

void DiffusionGemma::soft_embeddings(const Tensor& probs, const Tensor& out) {
  if (sharded()) {
    // The rank's vocabulary blocks' partial products, gathered into block order and summed as the
    // one-rank matmul_kn sums them (kVocabBlocks).
    const int64_t C = probs.dim(0), H = config_.text.hidden_size;
    const int blocks = kVocabBlocks / tp_.plan.size;
    Tensor part = backend_.alloc(ScalarType::kF32, {C, H, blocks});
    backend_.matmul_kn_blocks(probs, weights_.embed, blocks, part);
    Tensor all = backend_.alloc(ScalarType::kF32, {C, H, kVocabBlocks});
    tp_.collective->all_gather_last(part, all);
    backend_.sum_blocks(all, out);
  } else {
    backend_.matmul_kn(probs, weights_.embed, out);
  }
  backend_.scale(out, embed_scale_, out);
}

void DiffusionGemma::one_hot_soft_embeddings(const Tensor& ids, const Tensor& out) {
  if (!sharded()) return backend_.embed(ids, weights_.embed, embed_scale_, out);
  // The rows live on the ranks holding them; the others add -0 (exact), as in embed_inputs.
  backend_.embed_shard(ids, weights_.embed, tp_.plan.split(config_.text.vocab_size).begin, config_.text.vocab_size,
                       embed_scale_, out);
  tp_.collective->all_reduce_sum(out);
}

}  // namespace dgemma
