#pragma once
// The one memory plan: the engine's step budget, what the weights, the per-sequence canvas buffers and
// the activation workspace take, and how many pages of KV pool the rest of the budget buys (vLLM's
// rule: --gpu-memory-utilization of the device, or an explicit --kv-cache-memory). The engine factory
// sizes the engine with it and logs it, and `dgemma inspect` prints it — so the three never disagree.
// The context length no longer reserves memory: a request takes pages as it grows, so the plan says
// how many tokens the pool holds and how many sequences of max_model_len that is.
#include <cstdint>

#include "engine/kv_pool.h"
#include "model/config.h"

namespace dgemma {

// Fixed part of the activation workspace: cuBLAS/cuBLASLt workspaces, routing index buffers, small
// per-step tensors, the attention score budget (a stated allowance, not a measurement).
inline constexpr uint64_t kWorkspaceReserveBytes = uint64_t{512} << 20;

// Largest prompt chunk the encoder takes in one pass with chunked prefill.
inline constexpr int64_t kMaxPrefillChunk = 2048;

// CPU backend without --kv-cache-memory: the pool holds max_num_seqs sequences of max_model_len, at
// most this many bytes of full-attention pages (tests and small models; the CPU has no device budget).
inline constexpr uint64_t kCpuDefaultKvBytes = uint64_t{4} << 30;

// Tokens of the largest encoder chunk: at most kMaxPrefillChunk with chunked prefill, the whole
// context without; never less than one canvas.
int64_t prefill_chunk_tokens(const ModelConfig& config, int64_t max_model_len, bool enable_chunked_prefill);

struct MemoryPlanInputs {
  int64_t max_model_len = 0;
  int max_num_seqs = 4;
  int64_t max_num_batched_tokens = 0;  // 0: max_num_seqs * 2 canvases + one prefill chunk
  bool enable_chunked_prefill = true;
  bool cpu = false;                    // CPU backend: no device budget (see kCpuDefaultKvBytes)
  uint64_t device_bytes = 0;           // the device's memory
  double gpu_memory_utilization = 0.9;
  uint64_t used_bytes = 0;             // device memory in use before the pool (weights, context); 0: the weights counted
  uint64_t kv_cache_memory = 0;        // explicit pool size (--kv-cache-memory); 0: what the budget leaves
  int tensor_parallel_size = 1;        // > 1: the plan of ONE rank (device_bytes / used_bytes / the pool per GPU)
};

struct MemoryPlan {
  MemoryPlanInputs in;
  int canvas_length = 0;
  int64_t prefill_chunk = 0;
  int64_t max_num_batched_tokens = 0;  // the step budget the scheduler uses
  int64_t step_tokens = 0;             // tokens one step may encode (the budget, or one chunk over it)
  uint64_t budget_bytes = 0;           // device_bytes * utilization
  uint64_t weight_bytes = 0;           // used_bytes, or the text parameters as bf16
  uint64_t work_bytes_per_seq = 0;     // logits [C, V] (a rank: [C, V / N]) + soft embeddings [C, H], bf16
  uint64_t work_bytes_all_seqs = 0;
  uint64_t activation_bytes_per_token = 0;
  uint64_t workspace_bytes = 0;        // step_tokens * per-token activations + reserve
  KvGeometry kv;                       // bytes per page of each layer group
  uint64_t kv_budget_bytes = 0;        // what the pool may take
  KvPoolPlan pool;                     // pages of each group
  uint64_t kv_bytes_per_seq = 0;       // one sequence of max_model_len: its full pages + its sliding ring
  int64_t full_len_seqs = 0;           // sequences of max_model_len the pool holds at once
  uint64_t total_bytes = 0;            // weights + work + workspace + pool
  bool fits = false;                   // the pool holds at least two canvases (one request can run)
};

MemoryPlan plan_memory(const ModelConfig& config, const MemoryPlanInputs& in);

// bf16 bytes of the live intermediates of one layer for one token: an upper bound (everything summed
// as if alive at once).
uint64_t activation_bytes_per_token(const ModelConfig& config);

}  // namespace dgemma
