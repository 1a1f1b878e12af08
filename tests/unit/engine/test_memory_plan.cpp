// The one memory plan (engine/memory_plan.h): the prefill chunk the engine encodes by, and a KV pool
// whose bytes equal what allocate_kv_storage really takes.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "engine/memory_plan.h"
#include "engine/kv_pool.h"
#include "model/shard_plan.h"
#include "model/weights.h"

namespace dgemma {
namespace {

ModelConfig tiny() { return load_model_config(std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model"); }

TEST(MemoryPlan, PrefillChunkIsCappedByChunkingAndNeverBelowACanvas) {
  ModelConfig c = tiny();
  c.canvas_length = 16;
  EXPECT_EQ(prefill_chunk_tokens(c, 32768, true), kMaxPrefillChunk);
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
  EXPECT_EQ(a.kv_budget_bytes, a.budget_bytes - a.weight_bytes - a.work_bytes_all_seqs - a.workspace_bytes);
  EXPECT_EQ(a.pool.pages, b.pool.pages) << "the context length reserves nothing";
  EXPECT_EQ(a.full_len_seqs / 2, b.full_len_seqs) << "twice the context, half the sequences of it";
  EXPECT_LE(a.total_bytes, a.budget_bytes);
  in.kv_cache_memory = uint64_t{64} << 20;  // explicit
  EXPECT_LE(plan_memory(c, in).pool.bytes, uint64_t{64} << 20);
}

}  // namespace
}  // namespace dgemma
