// The one memory plan (engine/memory_plan.h): the prefill chunk the engine encodes and allocates by, and
// KV bytes that equal what allocate_kv really takes, with and without chunked prefill.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "engine/memory_plan.h"
#include "model/kv_cache.h"

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

TEST(MemoryPlan, KvBytesAreWhatTheAllocatorTakes) {
  const ModelConfig c = tiny();
  auto cpu = make_cpu_backend();
  bool saw_sliding = false;
  for (const auto& L : c.text.layers) saw_sliding = saw_sliding || L.type == LayerType::kSliding;
  ASSERT_TRUE(saw_sliding) << "the fixture must have sliding layers for this test to mean anything";
  for (const bool chunked : {true, false}) {
    for (const int64_t len : {int64_t{512}, int64_t{4096}}) {
      SCOPED_TRACE(testing::Message() << "chunked " << chunked << ", len " << len);
      const MemoryPlan p = plan_memory(c, len, 3, uint64_t{1} << 34, 0.9, chunked);
      const SequenceKv kv = allocate_kv(c, *cpu, len, prefill_chunk_tokens(c, len, chunked));
      EXPECT_EQ(p.kv_bytes_per_seq, kv.bytes());
      EXPECT_EQ(p.kv_bytes_all_seqs, 3 * kv.bytes());
      EXPECT_EQ(p.sliding_cap_tokens, std::min<int64_t>(len, c.text.sliding_window - 1 + p.prefill_chunk));
    }
  }
  // Without chunked prefill the sliding layers must hold a whole prompt: more bytes, not fewer.
  EXPECT_GT(plan_memory(c, 4096, 1, 1, 1, false).kv_bytes_per_seq, plan_memory(c, 4096, 1, 1, 1, true).kv_bytes_per_seq);
}

}  // namespace
}  // namespace dgemma
