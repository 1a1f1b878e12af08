#pragma once
// The paged KV pool: its geometry (page size, bytes per page of each layer group), how many pages of
// each group a memory budget buys, and the storage itself (one [pages, Hkv, P, D] tensor pair per
// layer on the backend). Page bookkeeping is engine/block_manager.h.
#include <array>
#include <cstdint>

#include "backend/backend.h"
#include "model/config.h"
#include "model/kv_view.h"

namespace dgemma {

struct KvGeometry {
  int64_t page_size = 0;                          // tokens per page (= canvas_length)
  std::array<uint64_t, kKvGroups> bytes_per_page{};  // every layer of the group, K and V, bf16
  std::array<int, kKvGroups> layers{};
  int64_t sliding_keep = 0;                       // window - 1
};
// tp_size > 1: one rank's pool under tensor parallelism (its KV heads, model/shard_plan.h).
KvGeometry kv_geometry(const ModelConfig& config, int tp_size = 1);

// Sliding pages every running sequence needs at most (its window plus a committed canvas), plus the
// pages the prefill chunks of one step may add: with these the sliding group never runs short, so the
// full-attention group alone decides admission.
int64_t sliding_pages_needed(const KvGeometry& g, int max_num_seqs, int64_t max_num_batched_tokens);

struct KvPoolPlan {
  std::array<int64_t, kKvGroups> pages{};
  uint64_t bytes = 0;
  int64_t full_tokens = 0;  // tokens the full-attention group holds (all sequences together)
};
// Splits `budget_bytes` of KV memory: the sliding group gets what it needs, the full group the rest.
// A model without sliding (or full) layers gets no pages of that group.
KvPoolPlan plan_kv_pool(const KvGeometry& g, uint64_t budget_bytes, int max_num_seqs, int64_t max_num_batched_tokens);

// Allocates the pool's storage on the backend (tp_size > 1: one rank's, with the rank's KV heads; every
// rank holds the same pages, so one block manager's page ids address all of them).
KvStorage allocate_kv_storage(const ModelConfig& config, Backend& backend, const KvPoolPlan& plan, int tp_size = 1);

}  // namespace dgemma
