#pragma once
// The one memory plan: how many bytes the weights, the KV caches, the per-sequence canvas buffers and
// the activation workspace take for a model, a context length and a number of running sequences.
// The engine allocates with it (prefill chunk, KV capacity), the engine factory checks the device's
// memory with it and logs it, and `dgemma inspect` prints it — so the three never disagree.
#include <cstdint>

#include "model/config.h"

namespace dgemma {

// Fixed part of the activation workspace: cuBLAS/cuBLASLt workspaces, routing index buffers, small
// per-step tensors (a stated allowance, not a measurement).
inline constexpr uint64_t kWorkspaceReserveBytes = uint64_t{256} << 20;

// Largest prompt chunk the encoder takes in one pass with chunked prefill.
inline constexpr int64_t kMaxPrefillChunk = 2048;

// Tokens of the largest encoder chunk (a prefill chunk or a committed canvas): at most kMaxPrefillChunk
// with chunked prefill, the whole context without; never less than one canvas. Sliding-window layers
// hold window - 1 + this many tokens.
int64_t prefill_chunk_tokens(const ModelConfig& config, int64_t max_model_len, bool enable_chunked_prefill);

struct MemoryPlan {
  int64_t max_model_len = 0;
  int max_num_seqs = 0;
  int canvas_length = 0;
  int64_t prefill_chunk = 0;                // prefill_chunk_tokens(...)
  uint64_t gpu_memory_bytes = 0;
  double gpu_memory_utilization = 0;
  uint64_t budget_bytes = 0;                // gpu_memory_bytes * utilization
  uint64_t weight_bytes = 0;                // text parameters as bf16 on the device
  uint64_t kv_bytes_per_token_full = 0;     // all full layers, K and V
  uint64_t kv_bytes_per_token_sliding = 0;  // all sliding layers, K and V, until their cap
  int64_t sliding_cap_tokens = 0;           // sliding layers keep window-1 + one prefill chunk
  uint64_t kv_bytes_per_seq = 0;            // kv_bytes(config, max_model_len, prefill_chunk): what the engine allocates
  uint64_t work_bytes_per_seq = 0;          // logits [C, V] + soft embeddings [C, H], bf16
  uint64_t kv_bytes_all_seqs = 0;           // max_num_seqs x kv_bytes_per_seq (saturating)
  uint64_t work_bytes_all_seqs = 0;         // max_num_seqs x work_bytes_per_seq (saturating)
  int64_t workspace_tokens = 0;             // tokens of the largest forward: (max_num_seqs + 1) canvases
  uint64_t activation_bytes_per_token = 0;
  uint64_t workspace_bytes = 0;             // workspace_tokens * per-token activations + reserve
  uint64_t total_bytes = 0;
  bool fits = false;
  int64_t max_num_seqs_fit = 0;             // largest --max-num-seqs whose plan fits (0: none)
};

MemoryPlan plan_memory(const ModelConfig& config, int64_t max_model_len, int max_num_seqs, uint64_t gpu_memory_bytes,
                       double gpu_memory_utilization, bool enable_chunked_prefill = true);

// bf16 bytes of the live intermediates of one layer for one token: an upper bound (everything summed
// as if alive at once). Attention is fused, so no [T, T] score matrix is counted.
uint64_t activation_bytes_per_token(const ModelConfig& config);

}  // namespace dgemma
