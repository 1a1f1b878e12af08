// The one memory plan (engine/memory_plan.h): the prefill chunk the engine encodes by, and a KV pool
// whose bytes equal what allocate_kv_storage really takes.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "engine/memory_plan.h"
#include "engine/kv_pool.h"

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
