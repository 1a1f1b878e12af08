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

// Fixed part of the activation workspace: the routing index buffers and small per-step tensors,
// cuBLAS's per-call state, the attention score buffer of the per-item (non-flash) attention path
// (CudaOptions::attention_score_budget: 256 MiB) — a stated allowance, not a measurement.
inline constexpr uint64_t kWorkspaceReserveBytes = uint64_t{512} << 20;

// Blocks a step holds at once that may each be up to one allocator granule (2 MiB) larger than asked
// for: the runner's buffers, the forward's persistent tensors and one layer's intermediates (about
// 30 on the 26B-A4B shape), with room to spare.
inline constexpr uint64_t kRoundingBlocks = 48;

// Device memory the GPU process takes outside the allocator after the weights were measured (so
// not under its ceiling): kernel modules the CUDA runtime loads on their first launch, the driver's
// local-memory growth for kernels with large stacks. The warm-up measures it (engine.cpp).
inline constexpr uint64_t kRuntimeReserveBytes = uint64_t{256} << 20;

// CPU backend without --kv-cache-memory: the pool holds max_num_seqs sequences of max_model_len, at
// most this many bytes of full-attention pages (tests and small models; the CPU has no device budget).
inline constexpr uint64_t kCpuDefaultKvBytes = uint64_t{4} << 30;

// Tokens of the largest encoder chunk: at most limits::kMaxPrefillChunk with chunked prefill, the whole
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
  bool cuda_graphs = false;            // GPU: denoising steps recorded as CUDA graphs (their memory pool planned)
};

// GPU budget rule: weights (measured) + runtime reserve + the pool (+ its rounding) + the step
// ceiling (buffers + workspace) + the graph pool <= budget. The engine sets the allocator's ceiling to
// what it holds once the pool is allocated (weights + pool) + step_ceiling_bytes + graph_pool_bytes, so
// a step that needs more fails with an out-of-memory error instead of growing past the budget.
struct MemoryPlan {
  MemoryPlanInputs in;
  int canvas_length = 0;
  int64_t prefill_chunk = 0;
  int64_t max_num_batched_tokens = 0;  // the step budget the scheduler uses
  int64_t encode_tokens = 0;           // tokens one step may write to the cache: the budget, or one chunk over it
  int64_t step_tokens = 0;             // tokens of one step's forward: encode_tokens, or all canvases + one chunk over a small budget
  uint64_t budget_bytes = 0;           // device_bytes * utilization
  uint64_t weight_bytes = 0;           // used_bytes, or the text parameters as bf16
  uint64_t work_bytes_per_seq = 0;     // logits [C, V] (a rank: [C, V / N]) + soft embeddings [C, H], bf16
  uint64_t work_bytes_all_seqs = 0;
  uint64_t activation_bytes_per_token = 0;
  uint64_t activation_bytes = 0;       // step_tokens * activation_bytes_per_token
  uint64_t attention_split_bytes = 0;  // flash attention's key-split partials at step_tokens, the largest head dim
  uint64_t sampler_bytes = 0;          // the sampler's scratch for one launch of max_num_seqs canvases
  uint64_t fp8_activation_bytes = 0;   // FP8-dynamic: W8A8's per-token E4M3 input copies at step_tokens (else 0)
  uint64_t reserve_bytes = 0;          // kWorkspaceReserveBytes
  uint64_t rounding_bytes = 0;         // kRoundingBlocks allocator granules
  uint64_t workspace_bytes = 0;        // activations + attention splits + sampler + FP8 inputs + reserve + rounding
  uint64_t step_ceiling_bytes = 0;     // work_bytes_all_seqs + workspace_bytes: what steps may hold in the allocator
  // CUDA graphs: the recorded steps' own memory (the allocator's graph pool), held for good: the
  // workspace of a step of max_num_seqs canvases (activations, attention splits, sampler, rounding).
  uint64_t graph_pool_bytes = 0;
  uint64_t pool_rounding_bytes = 0;    // the pool's 2 tensors a layer, each up to one granule over (GPU)
  uint64_t runtime_reserve_bytes = 0;  // kRuntimeReserveBytes (GPU), + the W8A8 GEMM's workspace for FP8-dynamic
  KvGeometry kv;                       // bytes per page of each layer group
  uint64_t kv_budget_bytes = 0;        // what the pool may take
  KvPoolPlan pool;                     // pages of each group
  uint64_t kv_bytes_per_seq = 0;       // one sequence of max_model_len: its full pages + its sliding ring
  int64_t full_len_seqs = 0;           // sequences of max_model_len the pool holds at once
  uint64_t total_bytes = 0;            // weights + runtime reserve + step ceiling + graph pool + pool + pool rounding
  bool fits = false;                   // the pool holds at least two canvases (one request can run)
};

MemoryPlan plan_memory(const ModelConfig& config, const MemoryPlanInputs& in);

// bf16 bytes of the live intermediates of one layer for one token: an upper bound (everything summed
// as if alive at once).
uint64_t activation_bytes_per_token(const ModelConfig& config);

}  // namespace dgemma
