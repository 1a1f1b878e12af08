#pragma once
// THE model: DiffusionGemma's encoder (causal, writes K/V) and decoder (bidirectional over the canvas,
// reads K/V, never writes), written once against the backend op interface (docs/MODEL.md §3-5).
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/collective.h"
#include "model/config.h"
#include "model/forward_dump.h"
#include "model/forward_inputs.h"
#include "model/kv_view.h"
#include "model/shard_plan.h"
#include "model/vision_tower.h"
#include "model/weights.h"

namespace dgemma {

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
  // K/V; denoise items fill logits. `in` is the items' block (encode_forward_inputs with
  // forward_shape()) and `block` an i32 device tensor holding in.words (the caller sent it up). `dump`
  // (optional) receives every named intermediate.
  void forward(std::span<ForwardItem> items, const KvStorage& kv, const ForwardInputs& in,
               const Tensor& block, const DumpHook& dump = {});
  // What encode_forward_inputs checks the items against.
  ForwardShape forward_shape() const { return {&config_, logits_columns(), backend_.device()}; }

  // Self-conditioning input for the next step from this step's bf16 probabilities [C, V] (a rank: its
  // columns): out[C, H] = bf16(bf16(probs . E) * embed_scale), the full result on every rank.
  void soft_embeddings(const Tensor& probs, const Tensor& out);
  // The backend's sampler over the logits of forward, all denoising canvases of a step at once, reading
  // the arguments the backend encoded into the step's block (Backend::sampler_batch_encoded); a rank
  // samples its vocabulary columns and exchanges the statistics.
  void sampler_batch_encoded(std::span<SamplerArgs> canvases, const Tensor& encoded);
  // Whether a rank samples over the whole vocabulary: its backend has no vocabulary-sharded sampler
  // (Backend::vocab_sharded_sampler; CUDA), so the ranks gather their logits columns
  // (gather_vocabulary) and each runs the one-rank sampler over all of them — the same outputs on
  // every rank and equal to one rank's by construction; a rank then keeps its columns of the
  // probabilities for soft_embeddings. The runner sizes its buffers by it.
  bool gathers_vocabulary() const { return sharded() && !backend_.vocab_sharded_sampler(); }
  // full[rows, vocabulary] = every rank's logits columns [rows, logits_columns()] in rank order.
  void gather_vocabulary(const Tensor& local, const Tensor& full);
  // The first vocabulary id of this rank's logits columns.
  int64_t vocab_first() const { return tp_.plan.split(config_.text.vocab_size).begin; }
  // Columns of the logits forward writes: the vocabulary, or this rank's slice of it.
  int64_t logits_columns() const { return config_.text.vocab_size / tp_.plan.size; }
  const TensorParallelRank& tensor_parallel() const { return tp_; }
  // The same of one-hot rows, out[T, H] = bf16(E[ids] * embed_scale): bit-identical to soft_embeddings
  // of one-hot probabilities (a GEMM row with one term is exact). Pinned positions (docs/MODEL.md §6.6).
  void one_hot_soft_embeddings(const Tensor& ids, const Tensor& out);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // The vision tower when the model has one and its weights are loaded (null: a text-only deployment).
  const VisionTower* vision() const { return vision_.get(); }
  float embed_scale() const { return embed_scale_; }
  // Whether the ops producing a W8A8 linear's input rows also write their FP8 rows for it (backend.h
  // Fp8Rows) in a pass of at most kFp8RowFusionMaxRows rows (on by default). Off, or in a larger pass,
  // every W8A8 linear quantises its own input: the same results, one launch more per linear (the A/B of
  // `dgemma_bench --fp8-row-fusion`, and the tests' baseline).
  void set_fp8_row_fusion(bool on) { fp8_row_fusion_ = on; }
  // Past this many rows the fused producers cost more than the launches they save (docs/BENCHMARKS.md,
  // "Kernel choices").
  static constexpr int64_t kFp8RowFusionMaxRows = 512;

 private:
  Tensor embed_inputs(std::span<ForwardItem> items, const ForwardInputs& in, const Tensor& block,
                      const ForwardDump& dump);
  // The encode items' images through the vision tower (all of the pass's images in one call), their soft
  // tokens written unscaled over the rows of their image tokens in x.
  void scatter_images(std::span<ForwardItem> items, const ForwardInputs& in, const Tensor& x,
                      const ForwardDump& dump);
  // The denoise items' rows of x (the last rows: the items follow the encode items, each C long): their
  // self-conditioning inputs gathered (zeros where an item has none), the SC-MLP added, then the
  // decoder input norm.
  void decoder_inputs(std::span<ForwardItem> items, const ForwardInputs& in, const Tensor& block,
                      const Tensor& x, const ForwardDump& dump);
  bool sharded() const { return tp_.collective != nullptr && tp_.plan.sharded(); }
  // out[T, N] = x . w^T for w split on its output rows across the ranks: the rank's rows, gathered.
  void linear_gathered(const Tensor& x, const Weight& w, const Tensor& out);
  // FP8 rows for an op to write beside its bf16 output x [T, K] when any of `consumers` (the linears
  // reading whole rows of x) takes them (takes_fp8_rows) and the fusion is on; else empty.
  Fp8Rows fp8_rows_for(std::initializer_list<const Weight*> consumers, int64_t T, int64_t K);
  // out = x . w^T, from x's FP8 rows where they are given and w takes them, else from x.
  void linear(const Tensor& x, const Fp8Rows& x_fp8, const Weight& w, const Tensor& out);
  // The gated GELU MLP (dense and self-conditioning): down(gelu(gate(x)) * up(x)) into out [T, H], with
  // the fused gate | up weight when it is set (else the two parts); x_fp8: x's FP8 rows (may be empty).
  void gated_mlp(const Tensor& x, const Fp8Rows& x_fp8, const Weight& gate_up, const Weight& gate,
                 const Weight& up, const Weight& down, const Tensor& out);
  // One KV group's attention items of a forward pass (AttentionBatchArgs): built and uploaded once per
  // forward together with the page tables, read by every layer of the group.
  struct GroupAttention {
    Tensor tables, items;                 // device: all page tables; [N * kAttentionItemFields] i32
    std::span<const AttentionItem> host;  // the items on the host
    std::span<const AttentionItem> plan;  // as the launch plans see them
    Tensor blocks;                        // device: the encode items' image blocks (empty: none)
    std::span<const ImageBlock> host_blocks;
  };
  void lm_head(std::span<ForwardItem> items, const std::vector<int64_t>& offsets, const Tensor& x,
               const ForwardDump& dump);
  // x: the residual stream, updated in place. normed: the layer's attention input norm when the
  // previous layer computed it (else empty), with its FP8 rows in normed_fp8 when the previous layer
  // wrote them; on return the next layer's (empty after the last).
  void layer(int li, std::span<ForwardItem> items, const std::vector<int64_t>& offsets,
             const Tensor& positions, const KvStorage& kv,
             const std::vector<std::array<Tensor, kKvGroups>>& tables,
             const std::array<GroupAttention, kKvGroups>& attention, Tensor& x, Tensor& normed,
             Fp8Rows& normed_fp8, const ForwardDump& dump);
  // The dumps of a layer's q / k / v projections and of their per-head norms before RoPE (`qkv`: the
  // fused projection's output, else q / k / v hold the projections), taken before the prologue.
  void dump_projections(int li, const ForwardDump& dump, const Tensor& qkv, const Tensor& q, const Tensor& k,
                        const Tensor& v);
  void sampler_batch(std::span<SamplerArgs> canvases);

  ModelConfig config_;
  ModelWeights weights_;
  Backend& backend_;
  TensorParallelRank tp_;
  float embed_scale_;
  float router_root_;
  bool fp8_row_fusion_ = true;
  Tensor inv_freq_sliding_, inv_freq_full_;
  std::unique_ptr<VisionTower> vision_;
};

// RoPE inverse frequencies [head_dim / 2] of a layer type (default or proportional), in fp32.
std::vector<float> rope_inv_freq(const RopeParams& rope, int head_dim);

}  // namespace dgemma
