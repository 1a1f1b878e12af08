#include "model/kv_cache.h"

#include <algorithm>

#include "util/error.h"

namespace dgemma {
namespace {

int64_t layer_capacity(const ModelConfig& c, const LayerSpec& L, int64_t max_tokens, int64_t max_chunk) {
  if (L.type == LayerType::kSliding) return std::min<int64_t>(max_tokens, c.text.sliding_window - 1 + max_chunk);
  return max_tokens;
}

}  // namespace

size_t SequenceKv::bytes() const {
  size_t b = 0;
  for (const auto& l : layers) b += l.k.nbytes() + l.v.nbytes();
  return b;
}

size_t kv_bytes(const ModelConfig& c, int64_t max_tokens, int64_t max_chunk) {
  size_t b = 0;
  for (const auto& L : c.text.layers)
    b += 2 * static_cast<size_t>(L.num_kv_heads) * static_cast<size_t>(layer_capacity(c, L, max_tokens, max_chunk)) *
         static_cast<size_t>(L.head_dim) * 2;
  return b;
}

SequenceKv allocate_kv(const ModelConfig& c, Backend& backend, int64_t max_tokens, int64_t max_chunk) {
  DG_CHECK(max_tokens > 0 && max_chunk > 0);
  SequenceKv kv;
  kv.max_tokens = max_tokens;
  kv.max_chunk = max_chunk;
  for (const auto& L : c.text.layers) {
    LayerKv lk;
    const int64_t cap = layer_capacity(c, L, max_tokens, max_chunk);
    lk.k = backend.alloc(ScalarType::kBF16, {L.num_kv_heads, cap, L.head_dim});
    lk.v = backend.alloc(ScalarType::kBF16, {L.num_kv_heads, cap, L.head_dim});
    lk.keep = L.type == LayerType::kSliding ? c.text.sliding_window - 1 : cap;
    kv.layers.push_back(std::move(lk));
  }
  return kv;
}

}  // namespace dgemma
