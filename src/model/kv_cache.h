#pragma once
// The K/V cache of one sequence, with the reference's retention (docs/MODEL.md §4.2): full-attention
// layers keep every token; sliding layers keep the most recent window-1 tokens (evicted after the
// attention of each encoder chunk). The decoder reads it and never writes it.
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace dgemma {

struct LayerKv {
  Tensor k, v;          // [Hkv, capacity, D] bf16 on the backend's device
  int64_t length = 0;   // valid rows (the most recent tokens, oldest first)
  int64_t keep = 0;     // tokens kept after an encoder chunk (window-1 for sliding layers, capacity otherwise)
};

struct SequenceKv {
  std::vector<LayerKv> layers;
  int64_t encoded = 0;       // tokens encoded so far (the reference's cumulative_length): next position
  int64_t max_tokens = 0;    // capacity for full layers
  int64_t max_chunk = 0;     // largest encoder chunk this cache accepts

  size_t bytes() const;
};

// Allocates a cache for up to `max_tokens` tokens encoded in chunks of at most `max_chunk` tokens.
SequenceKv allocate_kv(const ModelConfig& config, Backend& backend, int64_t max_tokens, int64_t max_chunk);
// Bytes such a cache takes (the engine's memory plan).
size_t kv_bytes(const ModelConfig& config, int64_t max_tokens, int64_t max_chunk);

}  // namespace dgemma
