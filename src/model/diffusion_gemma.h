#pragma once
// THE model: DiffusionGemma's encoder (causal, writes K/V) and decoder (bidirectional over the canvas,
// reads K/V, never writes), written once against the backend op interface (docs/MODEL.md §3-5).
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/collective.h"
#include "model/config.h"
#include "model/kv_view.h"
#include "model/shard_plan.h"
#include "model/weights.h"

namespace dgemma {

// One piece of work of one sequence in a batched forward pass.
struct ForwardItem {
  enum class Kind {
    kEncode,   // causal pass over tokens not yet in the cache (a prompt chunk or a committed canvas)
    kDenoise,  // bidirectional pass over a canvas at positions [kv.cached, +C); produces logits
  };
  Kind kind = Kind::kEncode;
  std::span<const int32_t> tokens;
  ItemKv kv;           // the sequence's cache; encode items write positions [kv.cached, +n) through it
  Tensor soft_embeds;  // kDenoise: [C, H] bf16 self-conditioning soft embeddings (probs·E·scale); empty at step 1
  Tensor logits;       // kDenoise: output [C, V] bf16 LM-head logits before the soft-cap (a rank: [C, V / N]);
                       // consecutive denoise items whose logits are adjacent rows of one buffer get one GEMM
  Tensor token_ids;    // i32 [n] on the backend's device, read instead of `tokens` when set
  // The cache length the attention launch plans assume when larger than kv.cached (a recorded step,
  // replayed later over longer caches, plans for the longest: AttentionBatchArgs::host_items); -1: kv.cached.
  int64_t plan_cached = -1;

  int64_t length() const { return token_ids.empty() ? static_cast<int64_t>(tokens.size()) : token_ids.numel(); }
};

// A forward pass's small inputs as one block of i32 words, built on the host before anything runs and
// sent up in one copy (the runner appends its own parts to `words` and sends the whole block): encode
// items' token ids, every token's position, both KV groups' page tables and attention items, and the
// device addresses of the denoise items' canvases (token_ids) and self-conditioning inputs
// (soft_embeds), which the forward gathers on the device. A forward reads nothing else from the host,
// so a recorded forward (Backend::capture) replays with another block of the same layout: the layout
// depends only on the items' kinds and lengths and on the tables' reserved room (encode_inputs).
struct ForwardInputs {
  std::vector<int32_t> words;
  int64_t total = 0;                     // tokens of all items
  std::vector<int64_t> offsets;          // item i: rows [offsets[i], offsets[i + 1]); offsets[N] = total
  int64_t ids_at = 0, positions_at = 0;  // [total] each
  int64_t tables_at = 0, table_words = 0;  // both groups' page tables, table_words reserved
  std::array<int64_t, kKvGroups> items_at{};  // [N * kAttentionItemFields] per group
  std::array<std::vector<AttentionItem>, kKvGroups> host_items;  // the items as the block holds them
  std::array<std::vector<AttentionItem>, kKvGroups> plan_items;  // as the launch plans see them (plan_cached)
  std::vector<int64_t> denoise;          // indices of the denoise items, in item order
  int64_t canvas_table_at = 0, soft_table_at = 0;  // one u64 address (2 words) per denoise item; 0: none
};

// Writes the device address of t (0: empty) at words[at, at + 2) as a little-endian u64, as the
// device reads the input block's address tables.
void put_address(std::vector<int32_t>& words, int64_t at, const Tensor& t);

// Receives every named intermediate of a forward pass (debug dumps, golden tests).
using DumpHook = std::function<void(const std::string& name, const Tensor& t)>;

// One rank of a tensor-parallel group: its place in the plan and its endpoint of the group's collective.
struct TensorParallelRank {
  ShardPlan plan;
  Collective* collective = nullptr;  // nullptr: one rank (the unsharded model)
};

class DiffusionGemma {
 public:
  // `weights` are the whole model, or with `tp` the rank's shard (shard_weights). Every rank runs the
  // same calls in the same order; each returns what the unsharded model returns (logits: its columns).
  DiffusionGemma(ModelConfig config, ModelWeights weights, Backend& backend, TensorParallelRank tp = {});

  // Runs all items in one pass: token-wise ops over the concatenation (weights read once), attention
  // per item against its own cache (one attention_batch of all items per layer). Encode items write
  // their K/V into the pages their tables name (the engine allocated them) before the layer's
  // attention reads the caches, so a denoise item placed after an encode item of its sequence sees its
  // K/V; denoise items fill logits.
  void forward(std::span<ForwardItem> items, const KvStorage& kv);
  // The same in two parts: the inputs block on the host (table_words: room for the page tables, at
  // least what the items' tables take; 0: exactly that), then the forward over `block`, an i32 device
  // tensor holding in.words (the caller sent it up).
  ForwardInputs encode_inputs(std::span<const ForwardItem> items, int64_t table_words = 0) const;
  void forward(std::span<ForwardItem> items, const KvStorage& kv, const ForwardInputs& in, const Tensor& block);

  // Self-conditioning input for the next step from this step's bf16 probabilities [C, V] (a rank: its
  // columns): out[C, H] = bf16(bf16(probs . E) * embed_scale), the full result on every rank.
  void soft_embeddings(const Tensor& probs, const Tensor& out);
  // The backend's sampler over the logits of forward (a rank: its vocabulary columns, exchanged);
  // sampler_batch: all denoising canvases of a step at once (each as sampler of it).
  void sampler(SamplerArgs args);
  void sampler_batch(std::span<SamplerArgs> canvases);
  // The same reading the arguments the backend encoded (Backend::sampler_batch_encoded).
  void sampler_batch_encoded(std::span<SamplerArgs> canvases, const Tensor& encoded);
  // Columns of the logits forward writes: the vocabulary, or this rank's slice of it.
  int64_t logits_columns() const { return config_.text.vocab_size / tp_.plan.size; }
  const TensorParallelRank& tensor_parallel() const { return tp_; }
  // The same of one-hot rows, out[T, H] = bf16(E[ids] * embed_scale): bit-identical to soft_embeddings
  // of one-hot probabilities (a GEMM row with one term is exact). Pinned positions (docs/MODEL.md §6.6).
  void one_hot_soft_embeddings(const Tensor& ids, const Tensor& out);

  void set_dump_hook(DumpHook hook) { dump_ = std::move(hook); }
  // Whether the residual junctions also produce the router's input and the next layer's attention
  // input norm (on by default; off: those norms run as ops of their own — A/B benchmarks). Same bits.
  void set_fused_junction_norms(bool on) { fused_norms_ = on; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  Backend& backend() { return backend_; }
  float embed_scale() const { return embed_scale_; }

 private:
  struct Positions;
  void dump(const std::string& name, const Tensor& t) const {
    if (dump_) dump_(name, t);
  }
  Tensor embed_inputs(std::span<ForwardItem> items, const ForwardInputs& in, const Tensor& block);
  // The denoise items' rows of x (the last rows: the items follow the encode items, each C long): their
  // self-conditioning inputs gathered (zeros where an item has none), the SC-MLP added, then the
  // decoder input norm.
  void decoder_inputs(std::span<ForwardItem> items, const ForwardInputs& in, const Tensor& block, const Tensor& x);
  bool sharded() const { return tp_.collective != nullptr && tp_.plan.sharded(); }
  // out[T, N] = x . w^T for w split on its output rows across the ranks: the rank's rows, gathered.
  void linear_gathered(const Tensor& x, const Weight& w, const Tensor& out);
  // The gated GELU MLP (dense and self-conditioning): down(gelu(gate(x)) * up(x)) into out [T, H], with
  // the fused gate | up weight when it is set (else the two parts).
  void gated_mlp(const Tensor& x, const Weight& gate_up, const Weight& gate, const Weight& up, const Weight& down,
                 const Tensor& out);
  // One KV group's attention items of a forward pass (AttentionBatchArgs): built and uploaded once per
  // forward together with the page tables, read by every layer of the group.
  struct GroupAttention {
    Tensor tables, items;                 // device: all page tables; [N * kAttentionItemFields] i32
    std::span<const AttentionItem> host;  // the items on the host
    std::span<const AttentionItem> plan;  // as the launch plans see them
  };
  void lm_head(std::span<ForwardItem> items, const std::vector<int64_t>& offsets, const Tensor& x);
  // x: the residual stream, updated in place. normed: the layer's attention input norm when the
  // previous layer computed it (else empty); on return the next layer's (empty after the last).
  void layer(int li, std::span<ForwardItem> items, const std::vector<int64_t>& offsets, const Tensor& positions,
             const KvStorage& kv, const std::vector<std::array<Tensor, kKvGroups>>& tables,
             const std::array<GroupAttention, kKvGroups>& attention, Tensor& x, Tensor& normed);

  ModelConfig config_;
  ModelWeights weights_;
  Backend& backend_;
  TensorParallelRank tp_;
  float embed_scale_;
  float router_root_;
  Tensor inv_freq_sliding_, inv_freq_full_;
  DumpHook dump_;
  bool fused_norms_ = true;
};

// RoPE inverse frequencies [head_dim / 2] of a layer type (default or proportional), in fp32.
std::vector<float> rope_inv_freq(const RopeParams& rope, int head_dim);

}  // namespace dgemma
