#pragma once
// How one rank of a tensor-parallel group holds the model (docs/MODEL.md "Tensor parallelism"). Every
// weight split is a split of a linear's OUTPUT rows, so each rank's slice is a contiguous row range of
// the checkpoint tensor and every output element is still one full-length dot product on one rank:
//   attention     q/k/v heads: rank r takes heads [r Hq/N, (r+1) Hq/N); KV heads likewise, replicated
//                 (each rank its group's head) where the layer has fewer KV heads than ranks;
//                 o_proj: output rows [r H/N, ..) over the gathered heads;
//   dense MLP     gate/up: rows [r I/N, ..); down: output rows [r H/N, ..) over the gathered activation
//                 (the self-conditioning MLP the same way);
//   experts       by expert (expert parallelism): experts [r E/N, ..) whole; the router is replicated;
//   embedding     vocabulary rows [r V/N, ..): the LM head's logits per rank are a vocabulary slice, the
//                 input lookup is an exact sum (one rank holds each row, the others add -0).
// The small replicated tensors (norms, router, scalars) are the same on every rank, and so is every
// activation between the gathers: each rank holds the full residual stream.
#include <cstdint>

#include "model/config.h"
#include "model/weights.h"

namespace dgemma {

// Tensor-parallel sizes: powers of two up to this (the vocabulary-blocked sums, backend.h kVocabBlocks,
// have this many blocks, so every rank holds whole blocks).
constexpr int kMaxTensorParallel = 8;

// How the MoE experts are split. Only kByExpert is implemented (docs/MODEL.md says why); the plan names
// the other so that adding it stays local to the MoE step and the expert slicing here.
enum class ExpertSplit { kByExpert };

struct IndexRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

struct ShardPlan {
  int rank = 0;
  int size = 1;
  ExpertSplit experts = ExpertSplit::kByExpert;

  bool sharded() const { return size > 1; }
  // Rank's equal part of n (n % size == 0, checked by validate_tensor_parallel).
  IndexRange split(int64_t n) const { return {n * rank / size, n * (rank + 1) / size}; }
  // The KV heads of a layer with hkv heads this rank holds: its share, or (hkv < size) the one head its
  // query heads read.
  IndexRange kv_heads(int64_t hkv) const {
    if (hkv >= size) return split(hkv);
    const int64_t h = rank * hkv / size;
    return {h, h + 1};
  }
};

// KV heads per rank of a layer with hkv heads under tensor parallelism of size n.
inline int64_t kv_heads_per_rank(int64_t hkv, int n) { return hkv >= n ? hkv / n : 1; }

// Throws Error(kInvalidArgument) naming the first dimension `size` does not divide (or a size that is not
// a power of two in [1, kMaxTensorParallel]).
void validate_tensor_parallel(const ModelConfig& config, int size);

// Rank `plan.rank`'s weights: views into the full host weights `full`, except the fused projections
// (fused_weights.h), whose rank weight is the concatenation of its slice of each part (a copy).
ModelWeights shard_weights(const ModelWeights& full, const ModelConfig& config, const ShardPlan& plan);

// The share of a checkpoint tensor one rank of `size` holds (1: replicated; KV projections where the
// heads are replicated hold more than 1/size) — dgemma inspect's per-GPU memory.
double rank_weight_share(const ModelConfig& config, const WeightSpec& spec, int size);

}  // namespace dgemma
