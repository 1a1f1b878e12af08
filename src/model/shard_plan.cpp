#include "model/shard_plan.h"

#include <optional>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/fused_weights.h"
#include "util/error.h"

namespace dgemma {
namespace {

Weight slice_rows(const Weight& w, IndexRange r) { return weight_rows(w, r.begin, r.end); }

// A rank's part of a fused weight: its slice of each part (part i: rows [first[i], first[i] + n[i])
// of the fused weight, the slice `r[i]` of those), concatenated — a host copy.
Weight fused_slices(const Weight& fused, std::initializer_list<std::pair<int64_t, IndexRange>> parts) {
  std::vector<Weight> slices;
  for (const auto& [first, r] : parts) slices.push_back(weight_rows(fused, first + r.begin, first + r.end));
  std::optional<Weight> out = concat_rows(slices);
  DG_CHECK(out.has_value());
  return *out;
}

}  // namespace

void validate_tensor_parallel(const ModelConfig& c, int n) {
  if (n < 1 || n > kMaxTensorParallel || (n & (n - 1)) != 0)
    fail_arg("--tensor-parallel-size must be 1, 2, 4 or 8 (got {})", n);
  if (n == 1) return;
  const TextConfig& t = c.text;
  auto need = [&](int64_t value, const char* what) {
    if (value % n != 0)
      fail_arg("--tensor-parallel-size {}: the model's {} ({}) is not divisible by {}", n, what, value, n);
  };
  need(t.num_attention_heads, "num_attention_heads");
  need(t.hidden_size, "hidden_size");
  need(t.intermediate_size, "intermediate_size");
  need(t.self_conditioning_size, "self_conditioning_size");
  need(t.num_experts, "num_experts");
  if (t.vocab_size % kVocabBlocks != 0)
    fail_arg("--tensor-parallel-size {}: the vocabulary ({}) is not a multiple of {}", n, t.vocab_size, kVocabBlocks);
  for (const LayerSpec& L : t.layers) {
    const int64_t hkv = L.num_kv_heads;
    if (hkv >= n ? hkv % n != 0 : n % hkv != 0)
      fail_arg("--tensor-parallel-size {}: a layer's {} KV heads can neither be split nor replicated over {} ranks", n, hkv, n);
    // Each rank's query heads must read the KV heads it holds.
    const int64_t q_local = t.num_attention_heads / n, groups = t.num_attention_heads / hkv;
    if (hkv < n && groups % q_local != 0)
      fail_arg("--tensor-parallel-size {}: {} query heads per rank straddle the {} KV heads", n, q_local, hkv);
  }
}

ModelWeights shard_weights(const ModelWeights& full, const ModelConfig& c, const ShardPlan& p) {
  if (!p.sharded()) return full;
  validate_tensor_parallel(c, p.size);
  const TextConfig& t = c.text;
  for (const Tensor* host : {&full.embed, &full.sc_down})
    if (host->device != Device::kCpu) fail(ErrorKind::kUnsupported, "shard_weights: the full weights must be host views");
  ModelWeights w = full;
  w.embed = full.embed.rows(p.split(t.vocab_size).begin, p.split(t.vocab_size).end);
  const int64_t H = t.hidden_size, S = t.self_conditioning_size, I = t.intermediate_size;
  auto rows = [](const Tensor& x, IndexRange r) { return x.rows(r.begin, r.end); };
  // Fused weights (fused_weights.h): the rank's fused weight is its slice of each part, in part order.
  if (!full.sc_gate_up.empty()) w.sc_gate_up = fused_slices(Weight(full.sc_gate_up), {{0, p.split(S)}, {S, p.split(S)}}).data;
  if (!full.sc_gate.empty()) w.sc_gate = rows(full.sc_gate, p.split(S));
  if (!full.sc_up.empty()) w.sc_up = rows(full.sc_up, p.split(S));
  w.sc_down = rows(full.sc_down, p.split(H));
  for (size_t li = 0; li < w.layers.size(); ++li) {
    const LayerWeights& f = full.layers[li];
    LayerWeights& l = w.layers[li];
    const int64_t D = f.spec.head_dim, Hq = t.num_attention_heads;
    const IndexRange q = p.split(Hq), kv = p.kv_heads(f.spec.num_kv_heads);
    const IndexRange q_rows{q.begin * D, q.end * D}, kv_rows{kv.begin * D, kv.end * D};
    if (!f.qkv_proj.empty()) {
      const int64_t nq = Hq * D, nk = f.spec.num_kv_heads * D;
      l.qkv_proj = f.spec.k_eq_v ? fused_slices(f.qkv_proj, {{0, q_rows}, {nq, kv_rows}})
                                 : fused_slices(f.qkv_proj, {{0, q_rows}, {nq, kv_rows}, {nq + nk, kv_rows}});
    } else {
      l.q_proj = slice_rows(f.q_proj, q_rows);
      l.k_proj = slice_rows(f.k_proj, kv_rows);
      if (!f.v_proj.empty()) l.v_proj = slice_rows(f.v_proj, kv_rows);
    }
    l.o_proj = slice_rows(f.o_proj, p.split(H));
    if (!f.mlp_gate_up.empty()) {
      l.mlp_gate_up = fused_slices(f.mlp_gate_up, {{0, p.split(I)}, {I, p.split(I)}});
    } else {
      l.mlp_gate = slice_rows(f.mlp_gate, p.split(I));
      l.mlp_up = slice_rows(f.mlp_up, p.split(I));
    }
    l.mlp_down = slice_rows(f.mlp_down, p.split(H));
    const IndexRange e = p.split(t.num_experts);
    l.experts_gate_up = slice_rows(f.experts_gate_up, e);
    l.experts_down = slice_rows(f.experts_down, e);
  }
  return w;
}

double rank_weight_share(const ModelConfig& c, const WeightSpec& s, int n) {
  if (n <= 1 || s.shape.size() < 2 || s.group == WeightGroup::kRouter) return 1.0;
  const bool kv = s.name.find("self_attn.k_proj") != std::string::npos || s.name.find("self_attn.v_proj") != std::string::npos;
  if (kv) {
    const int64_t hkv = c.text.layers[static_cast<size_t>(s.layer)].num_kv_heads;
    return static_cast<double>(kv_heads_per_rank(hkv, n)) / static_cast<double>(hkv);
  }
  return 1.0 / n;
}

}  // namespace dgemma
