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
  if (config_.has_vision && !weights_.vision.empty())
    vision_ = std::make_unique<VisionTower>(config_, weights_.vision, backend_);
}

Tensor DiffusionGemma::embed_inputs(std::span<ForwardItem> items, const ForwardInputs& in,
                                    const Tensor& block, const ForwardDump& dump) {
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
  scatter_images(items, in, x, dump);
  decoder_inputs(items, in, block, x, dump);
  return x;
}

void DiffusionGemma::scatter_images(std::span<ForwardItem> items, const ForwardInputs& in, const Tensor& x,
                                    const ForwardDump& dump) {
  std::vector<VisionImageInput> images;
  for (const ForwardItem& it : items)
    for (const ForwardImage& im : it.images) images.push_back(im.pixels);
  if (images.empty()) return;
  if (!vision_) fail_arg("this deployment takes no images (the vision tower is not loaded)");
  // Every rank runs the whole tower (its weights are not sharded) and gets the same soft tokens.
  const Tensor soft = vision_->encode(images);
  dump.put("vision.soft_tokens", soft);
  int64_t row = 0;
  for (size_t i = 0; i < items.size(); ++i)
    for (const ForwardImage& im : items[i].images) {
      const int64_t n = vision_->soft_tokens(im.pixels), at = in.offsets[i] + im.first;
      backend_.copy(x.rows(at, at + n), soft.rows(row, row + n));
      row += n;
    }
}

void DiffusionGemma::decoder_inputs(std::span<ForwardItem> items, const ForwardInputs& in,
                                    const Tensor& block, const Tensor& x, const ForwardDump& dump) {
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
  gated_mlp(u, Fp8Rows{}, weights_.sc_gate_up, weights_.sc_gate, weights_.sc_up, weights_.sc_down, sc);
  for (int64_t k = 0; k < nd; ++k)
    if (!items[static_cast<size_t>(in.denoise[static_cast<size_t>(k)])].soft_embeds.empty())
      dump.put("sc.mlp_out", sc.rows(k * C, (k + 1) * C));
  backend_.add(e, sc, e);
  backend_.rmsnorm(e, nullptr, eps, e);
  for (int64_t k = 0; k < nd; ++k) dump.put("decoder.input", e.rows(k * C, (k + 1) * C));
}

void DiffusionGemma::forward(std::span<ForwardItem> items, const KvStorage& kv, const ForwardInputs& in,
                             const Tensor& block, const DumpHook& hook) {
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
    attention[g].host_blocks = in.host_blocks;
    if (!in.host_blocks.empty())
      attention[g].blocks =
          block.rows(in.blocks_at, in.blocks_at + 2 * static_cast<int64_t>(in.host_blocks.size()));
    attention[g].plan = in.plan_items[g];
    for (size_t i = 0; i < items.size(); ++i) {
      const AttentionItem& a = in.host_items[g][i];
      if (a.table_len > 0)
        tables[i][g] = block.rows(in.tables_at + a.table_first, in.tables_at + a.table_first + a.table_len);
    }
  }

  const ForwardDump dump(hook, backend_, sharded());
  Tensor x = embed_inputs(items, in, block, dump);
  Tensor normed;  // each layer's attention input norm, computed by the layer before it
  Fp8Rows normed_fp8;
  for (int li = 0; li < t.num_hidden_layers; ++li)
    layer(li, items, in.offsets, positions, kv, tables, attention, x, normed, normed_fp8, dump);

  lm_head(items, in.offsets, x, dump);
}

void DiffusionGemma::lm_head(std::span<ForwardItem> items, const std::vector<int64_t>& offsets,
                             const Tensor& x, const ForwardDump& dump) {
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
      dump.put("final_norm", hn.rows(r, r + n));
      dump.whole("logits", items[k].logits);  // a rank holds its vocabulary columns only
      r += n;
    }
    i = j;
  }
}

void DiffusionGemma::layer(int li, std::span<ForwardItem> items, const std::vector<int64_t>& offsets,
                           const Tensor& positions, const KvStorage& kv,
                           const std::vector<std::array<Tensor, kKvGroups>>& tables,
                           const std::array<GroupAttention, kKvGroups>& attention, Tensor& x, Tensor& normed,
                           Fp8Rows& normed_fp8, const ForwardDump& dump) {
  const TextConfig& t = config_.text;
  const LayerWeights& w = weights_.layers[li];
  const LayerSpec& L = w.spec;
  const int64_t T = x.dim(0), H = t.hidden_size, D = L.head_dim;
  // This rank's query and KV heads (all of them unsharded).
  const int64_t Hq = t.num_attention_heads / tp_.plan.size, Hkv = tp_.plan.kv_heads(L.num_kv_heads).size();
  const float eps = static_cast<float>(t.rms_norm_eps);
  auto bf16 = [&](std::initializer_list<int64_t> dims) { return backend_.alloc(ScalarType::kBF16, dims); };
  dump.layer(li, "input", x);

  // --- attention -----------------------------------------------------------------------------
  Tensor a = normed;
  Fp8Rows a_fp8 = normed_fp8;  // the projections' input rows, when the previous layer wrote them
  if (a.empty()) {
    DG_CHECK(a_fp8.empty());
    a = bf16({T, H});
    backend_.rmsnorm(x, &w.input_norm, eps, a);
  }
  dump.layer(li, "attn_norm", a);
  // The q, k (and v) projections: one GEMM of the fused weight into [T, (Hq + Hkv (+ Hkv)) D] that the
  // prologue reads (or, with the parts stored in different formats, one GEMM each).
  Tensor q = bf16({T, Hq, D}), k = bf16({T, Hkv, D}), v = bf16({T, Hkv, D});
  Tensor qkv_out;
  if (!w.qkv_proj.empty()) {
    qkv_out = bf16({T, w.qkv_proj.rows()});
    DG_CHECK(w.qkv_proj.rows() == (Hq + (L.k_eq_v ? 1 : 2) * Hkv) * D);
    linear(a, a_fp8, w.qkv_proj, qkv_out);
  } else {
    linear(a, a_fp8, w.q_proj, q);
    linear(a, a_fp8, w.k_proj, k);
    if (!L.k_eq_v) linear(a, a_fp8, w.v_proj, v);
  }
  a_fp8 = normed_fp8 = Fp8Rows{};  // read by now (stream order): back to the allocator
  dump_projections(li, dump, qkv_out, q, k, v);
  // q_norm + RoPE, k_norm + RoPE, v's unit norm (K=V: V is the raw K projection, before k_norm and
  // RoPE): one fused op.
  QkvPrologueArgs qkv;
  qkv.q = q;
  qkv.k = k;
  qkv.v = v;
  qkv.qkv = qkv_out;  // empty when the projections ran one by one
  qkv.k_eq_v = L.k_eq_v;
  qkv.q_norm = w.q_norm;
  qkv.k_norm = w.k_norm;
  qkv.positions = positions;
  qkv.inv_freq = L.type == LayerType::kSliding ? inv_freq_sliding_ : inv_freq_full_;
  qkv.eps = eps;
  backend_.qkv_prologue(qkv);
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
    args.blocks = ga.blocks;
    args.host_blocks = ga.host_blocks;
    args.plan_items = ga.plan;
    args.out = attn;
    backend_.attention_batch(args);
  }
  dump.layer_whole(li, "attn_heads", attn);
  Tensor heads = attn.reshape({T, Hq * D});
  if (sharded()) {
    heads = bf16({T, Hq * D * tp_.plan.size});
    tp_.collective->all_gather_last(attn.reshape({T, Hq * D}), heads);
  }
  Tensor o = bf16({T, H});
  linear_gathered(heads, w.o_proj, o);
  dump.layer(li, "attn_out", o);
  // h1 = x + post_attn_norm(o), and the two FFN inputs and the router's input normed from it (one
  // fused op), with the FFN inputs' FP8 rows for W8A8 consumers.
  Tensor h1 = bf16({T, H}), d = bf16({T, H}), xe = bf16({T, H}), router_z = bf16({T, H});
  Fp8Rows d_fp8 = fp8_rows_for({&w.mlp_gate_up, &w.mlp_gate, &w.mlp_up}, T, H);
  Fp8Rows xe_fp8 = fp8_rows_for({&w.experts_gate_up}, T, H);
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
    r.router_scale = w.router_scale;
    r.router_root = router_root_;
    r.router_out = router_z;
    r.o_normed = dump.output({T, H});
    r.out_a_fp8 = d_fp8;
    r.out_b_fp8 = xe_fp8;
    backend_.attn_residual(r);
    dump.layer(li, "post_attn_norm", r.o_normed);
  }
  dump.layer(li, "mlp_norm", d);
  dump.layer(li, "moe_norm", xe);

  // --- dense MLP and MoE in parallel on h1 ------------------------------------------------------
  Tensor m1 = bf16({T, H});
  gated_mlp(d, d_fp8, w.mlp_gate_up, w.mlp_gate, w.mlp_up, w.mlp_down, m1);
  d_fp8 = Fp8Rows{};
  dump.layer(li, "mlp_out", m1);

  MoeArgs m;
  m.router_in = h1;
  m.expert_in = xe;
  m.expert_in_fp8 = xe_fp8;
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
  // The FFN junction sums the expert rows itself where the backend can (one launch fewer a layer); the
  // debug dumps read the summed rows.
  const bool moe_slots = backend_.sums_moe_slots() && !dump.on();
  const int64_t top_k = t.top_k_experts;
  if (moe_slots) {
    m.out_slots = bf16({T * top_k, H});
    m.out_order = backend_.alloc(ScalarType::kI32, {T, top_k});
  } else {
    m.out = bf16({T, H});
  }
  m.dbg_probs = dump.host_output(ScalarType::kF32, {T, t.num_experts});
  m.dbg_weights = dump.host_output(ScalarType::kF32, {T, t.top_k_experts});
  m.dbg_index = dump.host_output(ScalarType::kI32, {T, t.top_k_experts});
  backend_.moe(m);
  xe_fp8 = m.expert_in_fp8 = Fp8Rows{};
  dump.layer(li, "router_probs", m.dbg_probs);
  dump.layer(li, "router_weights", m.dbg_weights);
  dump.layer(li, "router_index", m.dbg_index);
  dump.layer(li, "moe_out", m.out);

  // x = (h1 + post_ff_norm(post_ff_norm1(m1) + post_ff_norm2(moe))) * the layer's scalar, and the
  // next layer's attention input norm of it: one fused op per run of items of one kind (encoder and
  // decoder rows have their own scalar).
  const bool has_next = li + 1 < t.num_hidden_layers;
  normed = has_next ? bf16({T, H}) : Tensor{};
  if (has_next) {
    const LayerWeights& nw = weights_.layers[li + 1];
    normed_fp8 = nw.qkv_proj.empty() ? fp8_rows_for({&nw.q_proj, &nw.k_proj, &nw.v_proj}, T, H)
                                     : fp8_rows_for({&nw.qkv_proj}, T, H);
  }
  const Tensor m1n = dump.output({T, H}), m2n = dump.output({T, H}), f = dump.output({T, H});
  auto rows_of = [](const Tensor& t, int64_t b, int64_t e) { return t.empty() ? t : t.rows(b, e); };
  for (size_t i = 0; i < items.size();) {
    size_t j = i + 1;
    while (j < items.size() && items[j].kind == items[i].kind) ++j;
    const int64_t b = offsets[i], e = offsets[j];
    FfnResidualArgs r;
    r.h1 = h1.rows(b, e);
    r.m1 = m1.rows(b, e);
    if (moe_slots) {
      r.m2_slots = m.out_slots.rows(b * top_k, e * top_k);
      r.m2_order = m.out_order.rows(b, e);
    } else {
      r.m2 = m.out.rows(b, e);
    }
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
      r.next_out_fp8 = normed_fp8.rows(b, e);
    }
    backend_.ffn_residual(r);
    i = j;
  }
  dump.layer(li, "mlp_post_norm", m1n);
  dump.layer(li, "moe_post_norm", m2n);
  dump.layer(li, "ffn_post_norm", f);
  dump.layer(li, "output", x);
}

void DiffusionGemma::dump_projections(int li, const ForwardDump& dump, const Tensor& qkv, const Tensor& q,
                                      const Tensor& k, const Tensor& v) {
  // A rank's heads are a slice: dumped unsharded only (the names denote whole tensors).
  if (!dump.on() || sharded()) return;
  const LayerWeights& w = weights_.layers[li];
  const bool k_eq_v = w.spec.k_eq_v;
  const float eps = static_cast<float>(config_.text.rms_norm_eps);
  // Each projection as a tensor of its own: the column block of the fused output, or the tensor itself.
  auto projection = [&](const Tensor& like, int64_t first) {
    if (qkv.empty()) return like;
    Tensor out = backend_.alloc(ScalarType::kBF16, {like.dim(0), like.dim(1), like.dim(2)});
    backend_.copy_columns(out, qkv, first);
    return out;
  };
  const int64_t q_cols = q.dim(1) * q.dim(2), k_cols = k.dim(1) * k.dim(2);
  const Tensor qp = projection(q, 0), kp = projection(k, q_cols);
  dump.layer(li, "q_proj", qp);
  dump.layer(li, "k_proj", kp);
  const Tensor vp = k_eq_v ? kp : projection(v, q_cols + k_cols);  // K=V: V is the raw K projection
  if (!k_eq_v) dump.layer(li, "v_proj", vp);
  // The per-head norms the prologue applies before RoPE (RMSNorm is per row of D: per head).
  auto normed = [&](const char* name, const Tensor& p, const Tensor* weight) {
    Tensor out = backend_.alloc(ScalarType::kBF16, {p.dim(0), p.dim(1), p.dim(2)});
    backend_.rmsnorm(p, weight, eps, out);
    dump.layer(li, name, out);
  };
  normed("q_norm", qp, &w.q_norm);
  normed("k_norm", kp, &w.k_norm);
  normed("v_norm", vp, nullptr);
}

void DiffusionGemma::linear_gathered(const Tensor& x, const Weight& w, const Tensor& out) {
  if (!sharded()) return backend_.matmul(x, w, out);
  Tensor part = backend_.alloc(ScalarType::kBF16, {x.dim(0), w.rows()});
  backend_.matmul(x, w, part);
  tp_.collective->all_gather_last(part, out);
}

Fp8Rows DiffusionGemma::fp8_rows_for(std::initializer_list<const Weight*> consumers, int64_t T, int64_t K) {
  if (!fp8_row_fusion_ || T > kFp8RowFusionMaxRows) return {};
  for (const Weight* w : consumers)
    if (takes_fp8_rows(*w))
      return Fp8Rows{backend_.alloc(ScalarType::kU8, {T, K}), backend_.alloc(ScalarType::kF32, {T})};
  return {};
}

void DiffusionGemma::linear(const Tensor& x, const Fp8Rows& x_fp8, const Weight& w, const Tensor& out) {
  if (!x_fp8.empty() && takes_fp8_rows(w)) return backend_.matmul_fp8(x_fp8, w, out);
  backend_.matmul(x, w, out);
}

void DiffusionGemma::gated_mlp(const Tensor& x, const Fp8Rows& x_fp8, const Weight& gate_up,
                               const Weight& gate, const Weight& up, const Weight& down, const Tensor& out) {
  const int64_t T = x.dim(0);
  Tensor g;
  // The down projection's input rows are whole rows here unless the width is sharded (then they are
  // gathered first, and their amax is not this rank's).
  Fp8Rows g_fp8;
  if (!gate_up.empty()) {  // one GEMM into [T, 2I], the two halves of each row multiplied
    const int64_t I = gate_up.rows() / 2;  // I: this rank's share of the width
    Tensor gu = backend_.alloc(ScalarType::kBF16, {T, 2 * I});
    linear(x, x_fp8, gate_up, gu);
    g = backend_.alloc(ScalarType::kBF16, {T, I});
    if (!sharded()) g_fp8 = fp8_rows_for({&down}, T, I);
    backend_.gelu_mul_halves(gu, g, g_fp8);
  } else {
    const int64_t I = gate.rows();
    g = backend_.alloc(ScalarType::kBF16, {T, I});
    Tensor u = backend_.alloc(ScalarType::kBF16, {T, I});
    linear(x, x_fp8, gate, g);
    linear(x, x_fp8, up, u);
    backend_.gelu_mul(g, u, g);
  }
  const int64_t I = g.dim(1);
  if (sharded()) {
    Tensor all = backend_.alloc(ScalarType::kBF16, {T, I * tp_.plan.size});
    tp_.collective->all_gather_last(g, all);
    g = all;
  }
  if (!g_fp8.empty()) return linear(g, g_fp8, down, out);
  linear_gathered(g, down, out);
}

void DiffusionGemma::sampler_batch(std::span<SamplerArgs> canvases) {
  if (sharded())
    for (SamplerArgs& a : canvases) {
      a.vocab_first = tp_.plan.split(config_.text.vocab_size).begin;
      a.vocab_total = config_.text.vocab_size;
      a.collective = tp_.collective;
    }
  backend_.sampler_batch(canvases);
}

void DiffusionGemma::gather_vocabulary(const Tensor& local, const Tensor& full) {
  DG_CHECK(sharded() && local.dim(-1) == logits_columns() && full.dim(-1) == config_.text.vocab_size);
  tp_.collective->all_gather_last(local, full);
}

void DiffusionGemma::sampler_batch_encoded(std::span<SamplerArgs> canvases, const Tensor& encoded) {
  // Unsharded, or over the gathered vocabulary (gathers_vocabulary): the one-rank sampler.
  if (!sharded() || gathers_vocabulary()) return backend_.sampler_batch_encoded(canvases, encoded);
  // The vocabulary-sharded sampler reads its host arguments (only the CPU backend has one).
  DG_CHECK(backend_.encoded_sampler_bytes(static_cast<int>(canvases.size())) == 0);
  sampler_batch(canvases);
}

void DiffusionGemma::soft_embeddings(const Tensor& probs, const Tensor& out) {
  if (sharded()) {
    // The rank's vocabulary blocks' partial products (block-major), gathered end to end into block
    // order and summed as the one-rank matmul_kn sums them (kVocabBlocks).
    const int64_t C = probs.dim(0), H = config_.text.hidden_size;
    const int blocks = kVocabBlocks / tp_.plan.size;
    Tensor part = backend_.alloc(ScalarType::kF32, {blocks, C, H});
    backend_.matmul_kn_blocks(probs, weights_.embed, blocks, part);
    Tensor all = backend_.alloc(ScalarType::kF32, {kVocabBlocks, C, H});
    tp_.collective->all_gather_last(part.reshape({1, blocks * C * H}),
                                    all.reshape({1, int64_t{kVocabBlocks} * C * H}));
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
