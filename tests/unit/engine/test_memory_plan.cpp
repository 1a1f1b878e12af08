// The one memory plan (engine/memory_plan.h): the prefill chunk the engine encodes by, and a KV pool
// whose bytes equal what allocate_kv_storage really takes.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "backend/caching_allocator.h"
#include "backend/workspace_bounds.h"
#include "engine/kv_pool.h"
#include "engine/limits.h"
#include "engine/memory_plan.h"
#include "model/quant_config.h"
#include "model/shard_plan.h"
#include "model/weights.h"

namespace dgemma {
namespace {

ModelConfig tiny() { return load_model_config(std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model"); }

TEST(MemoryPlan, PrefillChunkIsCappedByChunkingAndNeverBelowACanvas) {
  ModelConfig c = tiny();
  c.canvas_length = 16;
  EXPECT_EQ(prefill_chunk_tokens(c, 32768, true), limits::kMaxPrefillChunk);
  EXPECT_EQ(prefill_chunk_tokens(c, 1000, true), 1000);
  EXPECT_EQ(prefill_chunk_tokens(c, 32768, false), 32768) << "without chunking a prompt is one chunk";
  c.canvas_length = 4096;
  EXPECT_EQ(prefill_chunk_tokens(c, 32768, true), 4096) << "a commit is one canvas";
}

// The pool the plan sizes is what allocate_kv_storage takes, group by group.
TEST(MemoryPlan, PoolBytesAreWhatTheAllocatorTakes) {
  const ModelConfig c = tiny();
  auto cpu = make_cpu_backend();
  MemoryPlanInputs in;
  in.max_model_len = 1024;
  in.max_num_seqs = 3;
  in.cpu = true;
  for (const bool chunked : {true, false}) {
    in.enable_chunked_prefill = chunked;
    const MemoryPlan p = plan_memory(c, in);
    const KvStorage s = allocate_kv_storage(c, *cpu, p.pool);
    uint64_t bytes = 0;
    for (const auto& l : s.layers) bytes += l.k.nbytes() + l.v.nbytes();
    EXPECT_EQ(bytes, p.pool.bytes);
    EXPECT_TRUE(p.fits);
    // The CPU default: room for max_num_seqs sequences of max_model_len.
    EXPECT_GE(p.full_len_seqs, 3);
  }
}

// Per GPU under tensor parallelism: the weight bytes are what each rank's shard really holds, the pool's
// pages are what each rank's allocator takes (tiny_a: 2 sliding KV heads split, 1 full KV head
// replicated), and the logits buffer is the rank's vocabulary slice.
TEST(MemoryPlan, PerRankPlanMatchesTheShards) {
  const ModelConfig c = tiny();
  auto cpu = make_cpu_backend();
  const ModelWeights full = dummy_weights(c, *cpu, 1);
  MemoryPlanInputs in;
  in.max_model_len = 1024;
  in.cpu = true;
  const MemoryPlan one = plan_memory(c, in);
  for (int n : {2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(n));
    in.tensor_parallel_size = n;
    const MemoryPlan p = plan_memory(c, in);
    for (int r = 0; r < n; ++r) {
      const ModelWeights w = shard_weights(full, c, ShardPlan{r, n});
      ASSERT_TRUE(w.sc_gate.empty() && w.sc_up.empty()) << "fused into sc_gate_up";
      uint64_t bytes = w.embed.nbytes() + w.final_norm.nbytes() + w.sc_pre_norm.nbytes() + w.sc_gate_up.nbytes() +
                       w.sc_down.nbytes();
      for (const auto& l : w.layers) {
        for (const Tensor* t : {&l.input_norm, &l.post_attn_norm, &l.q_norm, &l.k_norm, &l.pre_ff_norm, &l.post_ff_norm1,
                                &l.router_proj, &l.router_scale, &l.per_expert_scale, &l.pre_ff_norm2, &l.post_ff_norm2,
                                &l.post_ff_norm})
          bytes += t->nbytes();
        for (const Weight* x : {&l.qkv_proj, &l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.mlp_gate_up, &l.mlp_gate,
                                &l.mlp_up, &l.mlp_down, &l.experts_gate_up, &l.experts_down})
          bytes += x->nbytes();
        bytes += 2;  // layer_scalar (a bf16 scalar, held as a float)
      }
      EXPECT_EQ(bytes, p.weight_bytes) << "rank " << r;
      const KvStorage s = allocate_kv_storage(c, *cpu, p.pool, n);
      uint64_t kv = 0;
      for (const auto& l : s.layers) kv += l.k.nbytes() + l.v.nbytes();
      EXPECT_EQ(kv, p.pool.bytes) << "rank " << r;
    }
    const int full_g = static_cast<int>(KvGroup::kFull), sliding = static_cast<int>(KvGroup::kSliding);
    EXPECT_EQ(p.kv.bytes_per_page[full_g], one.kv.bytes_per_page[full_g]) << "the one full KV head is replicated";
    EXPECT_EQ(p.kv.bytes_per_page[sliding], one.kv.bytes_per_page[sliding] / 2) << "2 sliding KV heads: one per rank";
    EXPECT_LT(p.weight_bytes, one.weight_bytes);
    EXPECT_EQ(p.work_bytes_per_seq, static_cast<uint64_t>(c.canvas_length) * (c.text.vocab_size / n + c.text.hidden_size) * 2);
  }
}

// A GPU budget: the pool gets what the weights, buffers and workspace leave, whatever max_model_len is.
TEST(MemoryPlan, PoolIsWhatTheBudgetLeavesNotContextTimesSequences) {
  const ModelConfig c = tiny();
  MemoryPlanInputs in;
  in.max_num_seqs = 8;
  in.device_bytes = uint64_t{4} << 30;
  in.gpu_memory_utilization = 0.5;
  in.used_bytes = uint64_t{100} << 20;
  in.max_model_len = 2048;  // both lengths take 2048-token prefill chunks
  const MemoryPlan a = plan_memory(c, in);
  in.max_model_len = 4096;
  const MemoryPlan b = plan_memory(c, in);
  EXPECT_EQ(a.kv_budget_bytes, a.budget_bytes - a.weight_bytes - a.step_ceiling_bytes - a.pool_rounding_bytes -
                                   a.runtime_reserve_bytes);
  EXPECT_EQ(a.pool.pages, b.pool.pages) << "the context length reserves nothing";
  EXPECT_EQ(a.full_len_seqs / 2, b.full_len_seqs) << "twice the context, half the sequences of it";
  EXPECT_LE(a.total_bytes, a.budget_bytes);
  in.kv_cache_memory = uint64_t{64} << 20;  // explicit
  EXPECT_LE(plan_memory(c, in).pool.bytes, uint64_t{64} << 20);
}


// Every term of the GPU plan of tiny_a, by hand. tiny_a: vocabulary 512, hidden 64, MLP 96 (and the
// self-conditioning MLP: 96), 4 query heads; 4 sliding layers (2 KV heads of 16) and 2 full layers
// (1 KV head of 32); 8 experts, top-2, expert MLP 32; canvas 16.
TEST(MemoryPlan, EveryGpuTermOfTinyAByHand) {
  const ModelConfig c = tiny();
  MemoryPlanInputs in;
  in.max_model_len = 2048;
  in.max_num_seqs = 4;
  in.device_bytes = uint64_t{4} << 30;
  in.gpu_memory_utilization = 0.5;      // budget 2,147,483,648
  in.used_bytes = uint64_t{100} << 20;  // 104,857,600 measured
  const MemoryPlan p = plan_memory(c, in);
  // Chunk min(2048, max_model_len) = 2048; step budget 4 seqs x 2 canvases x 16 + 2048 = 2176.
  EXPECT_EQ(p.prefill_chunk, 2048);
  EXPECT_EQ(p.step_tokens, 2176);
  // Per token: 6 x 64 + 3 x 128 (the fused q|k|v output's q part, q, attention out: 4 heads x 32)
  // + 4 x 32 (its k and v parts, new k and v) + 3 x 96 (MLP) + 2 x (2 x 64 + 3 x 32) (routed slots)
  // + 3 x 96 (SC MLP) = 1,920 bf16 = 3,840 bytes, + 8 experts x 2 x 4 bytes of f32 router logits and
  // probabilities = 3,904.
  EXPECT_EQ(p.activation_bytes_per_token, 3904u);
  EXPECT_EQ(p.activation_bytes, 2176u * 3904u);  // 8,495,104
  // Flash attention's key splits: 8 splits x 2,176 tokens x 4 heads = 69,632 rows of (max, sum) = 557,056
  // bytes + of a 32-wide fp32 output = 8,912,896; 9,469,952 in all.
  EXPECT_EQ(p.attention_split_bytes, 9'469'952u);
  // Sampler, one launch of 4 canvases: 64 rows, 1 vocabulary slice: 64 cells x (128 + 4 + 20 x 8) =
  // 18,688; 64 rows x 8 = 512; 4 z tables x 65,536 x 16 = 4,194,304; histograms of min(16, 64) rows x
  // 65,536 x 4 = 4,194,304; 7 x 256 alignment = 1,792: 8,409,600.
  EXPECT_EQ(p.sampler_bytes, 8'409'600u);
  EXPECT_EQ(p.reserve_bytes, kWorkspaceReserveBytes);
  EXPECT_EQ(p.rounding_bytes, 48u * (2u << 20));  // 100,663,296
  EXPECT_EQ(p.workspace_bytes, 663'908'864u);     // the five terms
  // Buffers: 4 x 16 x (512 + 64) x 2 = 73,728.
  EXPECT_EQ(p.work_bytes_all_seqs, 73'728u);
  EXPECT_EQ(p.step_ceiling_bytes, 663'982'592u);
  EXPECT_EQ(p.pool_rounding_bytes, 2u * 6u * (2u << 20));  // 25,165,824
  EXPECT_EQ(p.runtime_reserve_bytes, kRuntimeReserveBytes);
  // 2,147,483,648 - 104,857,600 - 663,982,592 - 25,165,824 - 268,435,456 = 1,085,042,176.
  EXPECT_EQ(p.kv_budget_bytes, 1'085'042'176u);
  EXPECT_LE(p.pool.bytes, p.kv_budget_bytes);
  EXPECT_EQ(p.total_bytes, p.weight_bytes + p.runtime_reserve_bytes + p.step_ceiling_bytes + p.pool.bytes + p.pool_rounding_bytes);
  EXPECT_LE(p.total_bytes, p.budget_bytes);
  // The CPU has no allocator ceiling and nothing outside it: no pool rounding, no runtime reserve.
  in.cpu = true;
  const MemoryPlan q = plan_memory(c, in);
  EXPECT_EQ(q.pool_rounding_bytes, 0u);
  EXPECT_EQ(q.runtime_reserve_bytes, 0u);
  EXPECT_EQ(q.workspace_bytes, p.workspace_bytes);
}

// An FP8-dynamic checkpoint's plan also holds the W8A8 paths' per-token E4M3 input copies (in the step
// ceiling) and the W8A8 GEMM's cuBLASLt workspace (outside the allocator); other checkpoints neither.
TEST(MemoryPlan, Fp8DynamicCountsTheW8A8InputCopies) {
  ModelConfig c = tiny();
  MemoryPlanInputs in;
  in.max_model_len = 2048;
  in.max_num_seqs = 4;
  in.device_bytes = uint64_t{4} << 30;
  in.gpu_memory_utilization = 0.5;
  in.used_bytes = uint64_t{100} << 20;
  const MemoryPlan bf = plan_memory(c, in);
  EXPECT_EQ(bf.fp8_activation_bytes, 0u);
  EXPECT_EQ(bf.runtime_reserve_bytes, kRuntimeReserveBytes);
  c.quant = quant_preset("fp8-dynamic");
  const MemoryPlan p = plan_memory(c, in);
  ASSERT_EQ(p.step_tokens, 2176);
  // The widest dense input is max(64 hidden, 96 MLP, 4 heads x 32) = 128: 2,176 x 128 + 2,176 x 4 =
  // 287,232 bytes. The MoE's: 2,176 tokens x (64 + 4) + 4,352 routed rows x (32 + 4) = 304,640. The
  // dense MLP's (its input, the experts' input and the down input): 2 x 2,176 x (64 + 4) + 2,176 x
  // (96 + 4) = 513,536, the largest (every part a multiple of 256 already).
  EXPECT_EQ(p.fp8_activation_bytes, 513'536u);
  EXPECT_EQ(p.workspace_bytes, bf.workspace_bytes + 513'536u);
  EXPECT_EQ(p.runtime_reserve_bytes, kRuntimeReserveBytes + workspace_bounds::kFp8GemmWorkspaceBytes);
  EXPECT_EQ(p.kv_budget_bytes, bf.kv_budget_bytes - 513'536u - workspace_bounds::kFp8GemmWorkspaceBytes);
}

// The scheduler always runs every sequence's canvas and its committed canvas's encode, and one prefill
// chunk when that took the whole budget: a small --max-num-batched-tokens does not make steps that
// small, and the plan sizes the workspace for the steps there really are.
TEST(MemoryPlan, StepTokensCoverWhatTheSchedulerTakesOverASmallBudget) {
  const ModelConfig c = tiny();  // canvas 16
  MemoryPlanInputs in;
  in.max_model_len = 4096;
  in.max_num_seqs = 8;
  in.max_num_batched_tokens = 64;
  in.device_bytes = uint64_t{4} << 30;
  in.used_bytes = uint64_t{100} << 20;
  const MemoryPlan p = plan_memory(c, in);
  EXPECT_EQ(p.max_num_batched_tokens, 64) << "the scheduler's budget is the flag";
  EXPECT_EQ(p.encode_tokens, 2048) << "what a step writes: one chunk over the budget (the sliding pages' count)";
  EXPECT_EQ(p.step_tokens, 8 * 2 * 16 + 2048);  // 2,304
  EXPECT_EQ(p.activation_bytes, 2304u * p.activation_bytes_per_token);
  in.max_num_batched_tokens = 10000;  // a large budget is the bound itself
  EXPECT_EQ(plan_memory(c, in).step_tokens, 10000);
}

// Under tensor parallelism the attention splits and the sampler are of the rank's heads and vocabulary.
TEST(MemoryPlan, PerRankWorkspaceTerms) {
  const ModelConfig c = tiny();
  MemoryPlanInputs in;
  in.max_model_len = 2048;
  in.cpu = true;
  in.tensor_parallel_size = 2;
  const MemoryPlan p = plan_memory(c, in);
  // 2 of the 4 query heads: 8 x 2,176 x 2 = 34,816 rows: 278,528 + 4,456,448 = 4,734,976.
  EXPECT_EQ(p.attention_split_bytes, 4'734'976u);
}

// A GPU rank samples the gathered vocabulary (DiffusionGemma::gathers_vocabulary): its per-sequence
// buffers hold the logits over the whole vocabulary besides its columns; a CPU rank holds its columns.
TEST(MemoryPlan, GpuRanksHoldTheWholeVocabularysLogits) {
  const ModelConfig c = tiny();
  const uint64_t C = static_cast<uint64_t>(c.canvas_length), V = static_cast<uint64_t>(c.text.vocab_size),
                 H = static_cast<uint64_t>(c.text.hidden_size);
  MemoryPlanInputs in;
  in.max_model_len = 2048;
  in.tensor_parallel_size = 2;
  in.cpu = true;
  EXPECT_EQ(plan_memory(c, in).work_bytes_per_seq, C * (V / 2 + H) * 2);
  in.cpu = false;
  in.device_bytes = 80ull << 30;
  EXPECT_EQ(plan_memory(c, in).work_bytes_per_seq, C * (V / 2 + H + V) * 2);
  in.tensor_parallel_size = 1;
  EXPECT_EQ(plan_memory(c, in).work_bytes_per_seq, C * (V + H) * 2);
}

}  // namespace
}  // namespace dgemma
