#pragma once
// The paged KV cache as the model sees it: each layer's pool of pages, and for each item of a forward
// pass the sequence's page tables (one per layer group). Which pages a sequence holds, prefix sharing
// and eviction are the engine's business (engine/kv_pool.h); the model only reads and writes through
// the tables. Retention is the reference's (docs/MODEL.md §4.2): full-attention layers see every
// cached token, sliding layers the most recent window-1 of them.
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/tensor.h"
#include "model/config.h"

namespace dgemma {

enum class KvGroup : int { kFull = 0, kSliding = 1 };
constexpr int kKvGroups = 2;
inline KvGroup kv_group_of(const LayerSpec& L) {
  return L.type == LayerType::kSliding ? KvGroup::kSliding : KvGroup::kFull;
}

// One layer's pool: [num_pages, Hkv, P, D] bf16 keys and values on the backend's device.
struct KvLayerPages {
  Tensor k, v;
};

struct KvStorage {
  int64_t page_size = 0;
  std::vector<KvLayerPages> layers;  // one per model layer; a layer uses its group's page ids
};

// The cache of one sequence for one forward item.
struct ItemKv {
  int64_t cached = 0;  // tokens of the sequence in the cache = the absolute position of the item's first token
  std::array<std::span<const int32_t>, kKvGroups> tables;  // logical page (position / P) -> pool page; -1: absent
};

// Tokens a sliding layer keeps visible (window - 1, as the reference's cache retains).
inline int64_t sliding_keep(const ModelConfig& c) { return c.text.sliding_window - 1; }

}  // namespace dgemma
