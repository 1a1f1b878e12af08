#include "engine/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/kv_cache.h"
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
  const int64_t chunk = enable_chunked_prefill ? std::min(kMaxPrefillChunk, max_model_len) : max_model_len;
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
  elems += 2 * q_width + 2 * kv_width;            // q, attention output, new k and v
  elems += 3 * int64_t{t.intermediate_size};      // dense MLP gate, up, activation
  elems += K * (2 * H + 3 * int64_t{t.moe_intermediate_size});  // per routed slot: input, gate/up, act, down
  elems += 3 * int64_t{t.self_conditioning_size};  // SC MLP (decoder input)
  return static_cast<uint64_t>(elems) * kBf16Bytes + static_cast<uint64_t>(t.num_experts) * 2 * 4;  // f32 router logits+probs
}

MemoryPlan plan_memory(const ModelConfig& c, int64_t max_model_len, int max_num_seqs, uint64_t gpu_memory_bytes,
                       double gpu_memory_utilization, bool enable_chunked_prefill) {
  MemoryPlan p;
  const TextConfig& t = c.text;
  p.max_model_len = max_model_len;
  p.max_num_seqs = max_num_seqs;
  p.canvas_length = c.canvas_length;
  p.prefill_chunk = prefill_chunk_tokens(c, max_model_len, enable_chunked_prefill);
  p.gpu_memory_bytes = gpu_memory_bytes;
  p.gpu_memory_utilization = gpu_memory_utilization;
  p.budget_bytes = static_cast<uint64_t>(std::floor(static_cast<double>(gpu_memory_bytes) * gpu_memory_utilization));
  p.weight_bytes = static_cast<uint64_t>(count_parameters(c).total) * kBf16Bytes;
  bool any_sliding = false;
  for (const auto& L : t.layers) {
    const uint64_t per = 2 * static_cast<uint64_t>(L.num_kv_heads) * static_cast<uint64_t>(L.head_dim) * kBf16Bytes;
    if (L.type == LayerType::kFull) {
      p.kv_bytes_per_token_full += per;
    } else {
      p.kv_bytes_per_token_sliding += per;
      any_sliding = true;
    }
  }
  const int64_t C = c.canvas_length;
  p.sliding_cap_tokens = any_sliding ? std::min<int64_t>(max_model_len, int64_t{t.sliding_window} - 1 + p.prefill_chunk) : 0;
  p.kv_bytes_per_seq = kv_bytes(c, max_model_len, p.prefill_chunk);
  p.work_bytes_per_seq = static_cast<uint64_t>(C) * (static_cast<uint64_t>(t.vocab_size) + t.hidden_size) * kBf16Bytes;
  p.kv_bytes_all_seqs = sat_mul(static_cast<uint64_t>(max_num_seqs), p.kv_bytes_per_seq);
  p.work_bytes_all_seqs = sat_mul(static_cast<uint64_t>(max_num_seqs), p.work_bytes_per_seq);
  p.activation_bytes_per_token = activation_bytes_per_token(c);
  // The largest forward: a denoising canvas for every running sequence plus one canvas-sized prefill
  // or commit chunk. total(n) = base + n * per_seq, so the largest n that fits is a division.
  const uint64_t act_per_canvas = sat_mul(static_cast<uint64_t>(C), p.activation_bytes_per_token);
  const uint64_t per_seq = sat_add(sat_add(p.kv_bytes_per_seq, p.work_bytes_per_seq), act_per_canvas);
  const uint64_t base = sat_add(sat_add(p.weight_bytes, kWorkspaceReserveBytes), act_per_canvas);
  p.workspace_tokens = (int64_t{max_num_seqs} + 1) * C;
  p.workspace_bytes = sat_add(sat_mul(static_cast<uint64_t>(p.workspace_tokens), p.activation_bytes_per_token), kWorkspaceReserveBytes);
  p.total_bytes = sat_add(sat_add(p.weight_bytes, p.workspace_bytes), sat_add(p.kv_bytes_all_seqs, p.work_bytes_all_seqs));
  p.fits = p.total_bytes <= p.budget_bytes;
  p.max_num_seqs_fit = p.budget_bytes >= base ? static_cast<int64_t>((p.budget_bytes - base) / per_seq) : 0;
  return p;
}

}  // namespace dgemma
