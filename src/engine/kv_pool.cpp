#include "engine/kv_pool.h"

#include <algorithm>

#include "model/shard_plan.h"
#include "util/error.h"

namespace dgemma {

KvGeometry kv_geometry(const ModelConfig& c, int tp_size) {
  KvGeometry g;
  g.page_size = c.canvas_length;
  g.sliding_keep = sliding_keep(c);
  for (const auto& L : c.text.layers) {
    const int grp = static_cast<int>(kv_group_of(L));
    g.layers[grp] += 1;
    g.bytes_per_page[grp] += 2 * static_cast<uint64_t>(kv_heads_per_rank(L.num_kv_heads, tp_size)) * static_cast<uint64_t>(L.head_dim) * 2 *
                             static_cast<uint64_t>(g.page_size);
  }
  return g;
}

int64_t sliding_pages_needed(const KvGeometry& g, int max_num_seqs, int64_t max_num_batched_tokens) {
  if (g.layers[static_cast<int>(KvGroup::kSliding)] == 0) return 0;
  const int64_t P = g.page_size;
  const int64_t per_seq = (g.sliding_keep + P + P - 1) / P + 2;  // window + a committed canvas, both ends partial
  return int64_t{max_num_seqs} * per_seq + (max_num_batched_tokens + P - 1) / P;
}

KvPoolPlan plan_kv_pool(const KvGeometry& g, uint64_t budget_bytes, int max_num_seqs, int64_t max_num_batched_tokens) {
  KvPoolPlan p;
  const int full = static_cast<int>(KvGroup::kFull), sliding = static_cast<int>(KvGroup::kSliding);
  p.pages[sliding] = sliding_pages_needed(g, max_num_seqs, max_num_batched_tokens);
  const uint64_t sliding_bytes = static_cast<uint64_t>(p.pages[sliding]) * g.bytes_per_page[sliding];
  if (g.layers[full] > 0 && budget_bytes > sliding_bytes)
    p.pages[full] = static_cast<int64_t>((budget_bytes - sliding_bytes) / g.bytes_per_page[full]);
  if (g.layers[full] == 0 && budget_bytes < sliding_bytes) p.pages[sliding] = 0;
  p.bytes = static_cast<uint64_t>(p.pages[full]) * g.bytes_per_page[full] + static_cast<uint64_t>(p.pages[sliding]) * g.bytes_per_page[sliding];
  p.full_tokens = p.pages[full] * g.page_size;
  return p;
}

KvStorage allocate_kv_storage(const ModelConfig& c, Backend& backend, const KvPoolPlan& plan, int tp_size) {
  KvStorage s;
  s.page_size = c.canvas_length;
  for (const auto& L : c.text.layers) {
    const int64_t pages = std::max<int64_t>(plan.pages[static_cast<int>(kv_group_of(L))], 1);
    const int64_t heads = kv_heads_per_rank(L.num_kv_heads, tp_size);
    KvLayerPages lp;
    lp.k = backend.alloc(ScalarType::kBF16, {pages, heads, s.page_size, L.head_dim});
    lp.v = backend.alloc(ScalarType::kBF16, {pages, heads, s.page_size, L.head_dim});
    s.layers.push_back(std::move(lp));
  }
  return s;
}

}  // namespace dgemma
