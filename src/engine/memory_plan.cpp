#include "engine/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/caching_allocator.h"
#include "backend/workspace_bounds.h"
#include "engine/limits.h"
#include "model/weights.h"

namespace dgemma {
namespace {

constexpr uint64_t kBf16Bytes = 2;

uint64_t sat_add(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max() : a + b;
}
uint64_t sat_mul(uint64_t a, uint64_t b) {
  return (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) ? std::numeric_limits<uint64_t>::max() : a * b;
}

}  // namespace

int64_t prefill_chunk_tokens(const ModelConfig& c, int64_t max_model_len, bool enable_chunked_prefill) {
  const int64_t chunk =
      enable_chunked_prefill ? std::min(limits::kMaxPrefillChunk, max_model_len) : max_model_len;
  return std::max<int64_t>(chunk, c.canvas_length);
}

uint64_t activation_bytes_per_token(const ModelConfig& c) {
  const TextConfig& t = c.text;
  int64_t q_width = 0, kv_width = 0;
  for (const auto& L : t.layers) {
    q_width = std::max<int64_t>(q_width, int64_t{t.num_attention_heads} * L.head_dim);
    kv_width = std::max<int64_t>(kv_width, int64_t{L.num_kv_heads} * L.head_dim);
  }
  const int64_t H = t.hidden_size, K = t.top_k_experts;
  int64_t elems = 6 * H;                          // residual, norm outputs, branch outputs
  elems += 3 * q_width + 4 * kv_width;            // fused q|k|v projection, q, attention output, new k and v
  elems += 3 * int64_t{t.intermediate_size};      // dense MLP gate, up, activation
  elems += K * (2 * H + 3 * int64_t{t.moe_intermediate_size});  // per routed slot: input, gate/up, act, down
  elems += 3 * int64_t{t.self_conditioning_size};  // SC MLP (decoder input)
  return static_cast<uint64_t>(elems) * kBf16Bytes + static_cast<uint64_t>(t.num_experts) * 2 * 4;  // f32 router logits+probs
}

MemoryPlan plan_memory(const ModelConfig& c, const MemoryPlanInputs& in) {
  MemoryPlan p;
  p.in = in;
  const TextConfig& t = c.text;
  const int64_t C = c.canvas_length;
  p.canvas_length = c.canvas_length;
  p.prefill_chunk = prefill_chunk_tokens(c, in.max_model_len, in.enable_chunked_prefill);
  p.max_num_batched_tokens = in.max_num_batched_tokens > 0 ? std::max<int64_t>(in.max_num_batched_tokens, C)
                                                           : int64_t{in.max_num_seqs} * 2 * C + p.prefill_chunk;
  // The sliding pages are sized by what a step writes (kv_pool.h sliding_pages_needed); the activations by
  // what it computes: the scheduler always takes every running sequence's canvas (and its committed
  // canvas's encode) and, when that leaves no budget, still one prefill chunk, so a step's forward can
  // exceed a small budget.
  p.encode_tokens = std::max(p.max_num_batched_tokens, p.prefill_chunk);
  p.step_tokens = std::max(p.encode_tokens, int64_t{in.max_num_seqs} * 2 * C + p.prefill_chunk);
  p.budget_bytes = static_cast<uint64_t>(std::floor(static_cast<double>(in.device_bytes) * in.gpu_memory_utilization));
  // Measured when known; else the weights as the backend holds them (quantised expert stacks packed).
  // Tensor parallelism: one rank's share of the weights, its vocabulary columns of the logits and its KV
  // heads; the activation estimate stays the unsharded one (the gathered tensors are full width).
  const int tp = std::max(1, in.tensor_parallel_size);
  p.weight_bytes = in.used_bytes > 0 ? in.used_bytes
                   : c.quant.quantized() || tp > 1 ? device_weight_bytes(c, tp)
                                                   : static_cast<uint64_t>(count_parameters(c).total) * kBf16Bytes;
  // A GPU rank also holds its canvases' logits over the whole vocabulary: it samples the gathered
  // vocabulary (DiffusionGemma::gathers_vocabulary).
  const int64_t sampled_vocab = tp > 1 && !in.cpu ? t.vocab_size : t.vocab_size / tp;
  p.work_bytes_per_seq = static_cast<uint64_t>(C) *
                         (static_cast<uint64_t>(t.vocab_size / tp) + t.hidden_size +
                          (sampled_vocab != t.vocab_size / tp ? static_cast<uint64_t>(sampled_vocab) : 0)) *
                         kBf16Bytes;
  p.work_bytes_all_seqs = sat_mul(static_cast<uint64_t>(in.max_num_seqs), p.work_bytes_per_seq);
  p.activation_bytes_per_token = activation_bytes_per_token(c);
  p.activation_bytes = sat_mul(static_cast<uint64_t>(p.step_tokens), p.activation_bytes_per_token);
  int64_t head_dim = 0;
  for (const auto& L : t.layers) head_dim = std::max<int64_t>(head_dim, L.head_dim);
  p.attention_split_bytes = workspace_bounds::flash_split_bytes(p.step_tokens, t.num_attention_heads / tp, head_dim,
                                                                workspace_bounds::kFlashMaxAutoSplits);
  p.sampler_bytes = workspace_bounds::sampler_bytes(in.max_num_seqs, C, sampled_vocab);
  if (c.quant.fp8_act_token) {  // the W8A8 paths' input copies (counted whether or not they are switched on)
    int64_t widest = std::max<int64_t>(t.hidden_size, t.intermediate_size);
    for (const auto& L : t.layers) widest = std::max<int64_t>(widest, int64_t{t.num_attention_heads} * L.head_dim / tp);
    p.fp8_activation_bytes =
        workspace_bounds::fp8_activation_bytes(p.step_tokens, widest, t.hidden_size, t.intermediate_size,
                                               t.top_k_experts, t.moe_intermediate_size);
  }
  p.reserve_bytes = kWorkspaceReserveBytes;
  p.rounding_bytes = kRoundingBlocks * CachingAllocator::kLargeGranule;
  p.workspace_bytes = sat_add(sat_add(sat_add(p.activation_bytes, p.attention_split_bytes), sat_add(p.sampler_bytes, p.reserve_bytes)),
                              sat_add(p.rounding_bytes, p.fp8_activation_bytes));
  p.step_ceiling_bytes = sat_add(p.work_bytes_all_seqs, p.workspace_bytes);
  if (!in.cpu && in.cuda_graphs) {
    const int64_t graph_tokens = int64_t{in.max_num_seqs} * C;
    p.graph_pool_bytes =
        sat_add(sat_add(sat_mul(static_cast<uint64_t>(graph_tokens), p.activation_bytes_per_token),
                        workspace_bounds::flash_split_bytes(graph_tokens, t.num_attention_heads / tp, head_dim,
                                                            workspace_bounds::kFlashMaxAutoSplits)),
                sat_add(p.sampler_bytes, p.rounding_bytes));
  }
  if (!in.cpu) {
    p.pool_rounding_bytes = 2 * static_cast<uint64_t>(t.num_hidden_layers) * CachingAllocator::kLargeGranule;
    p.runtime_reserve_bytes = kRuntimeReserveBytes + (c.quant.fp8_act_token ? workspace_bounds::kFp8GemmWorkspaceBytes : 0);
  }
  p.kv = kv_geometry(c, tp);
  const int full = static_cast<int>(KvGroup::kFull), sliding = static_cast<int>(KvGroup::kSliding);
  const int64_t seq_pages = (in.max_model_len + C - 1) / C;
  const uint64_t sliding_bytes =
      static_cast<uint64_t>(sliding_pages_needed(p.kv, in.max_num_seqs, p.encode_tokens)) * p.kv.bytes_per_page[sliding];
  if (in.kv_cache_memory > 0) {
    p.kv_budget_bytes = in.kv_cache_memory;
  } else if (in.cpu) {
    p.kv_budget_bytes = sat_add(std::min(kCpuDefaultKvBytes, sat_mul(sat_mul(static_cast<uint64_t>(seq_pages), p.kv.bytes_per_page[full]),
                                                                     static_cast<uint64_t>(in.max_num_seqs))),
                                sliding_bytes);
  } else {
    const uint64_t taken = sat_add(sat_add(sat_add(p.weight_bytes, p.step_ceiling_bytes), p.graph_pool_bytes),
                                   sat_add(p.pool_rounding_bytes, p.runtime_reserve_bytes));
    p.kv_budget_bytes = p.budget_bytes > taken ? p.budget_bytes - taken : 0;
  }
  p.pool = plan_kv_pool(p.kv, p.kv_budget_bytes, in.max_num_seqs, p.encode_tokens);
  const int64_t ring = p.kv.layers[sliding] > 0 ? (p.kv.sliding_keep + 2 * C - 1) / C + 2 : 0;
  p.kv_bytes_per_seq = sat_add(sat_mul(static_cast<uint64_t>(seq_pages), p.kv.bytes_per_page[full]),
                               sat_mul(static_cast<uint64_t>(ring), p.kv.bytes_per_page[sliding]));
  p.full_len_seqs = p.kv.layers[full] > 0 ? p.pool.pages[full] / std::max<int64_t>(seq_pages, 1)
                                          : (ring > 0 ? p.pool.pages[sliding] / ring : 0);
  p.total_bytes = sat_add(sat_add(sat_add(sat_add(p.weight_bytes, p.step_ceiling_bytes), p.graph_pool_bytes),
                                  sat_add(p.pool_rounding_bytes, p.runtime_reserve_bytes)),
                          p.pool.bytes);
  p.fits = p.kv.layers[full] > 0 ? p.pool.full_tokens >= 2 * C : p.pool.pages[sliding] > 0;
  return p;
}

}  // namespace dgemma
