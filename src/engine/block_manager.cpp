#include "engine/block_manager.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"
#include "util/sha256.h"

namespace dgemma {

PageHash chain_hash(const PageHash& prev, std::span<const int32_t> tokens) {
  Sha256 h;
  h.update(&prev.hi, sizeof prev.hi);
  h.update(&prev.lo, sizeof prev.lo);
  h.update(tokens.data(), tokens.size_bytes());
  const Sha256Digest d = h.finish();
  PageHash out;
  std::memcpy(&out.hi, d.data(), 8);
  std::memcpy(&out.lo, d.data() + 8, 8);
  return out;
}

BlockManager::BlockManager(BlockManagerConfig config) : config_(config) {
  DG_CHECK(config_.page_size > 0);
  for (int g = 0; g < kKvGroups; ++g) {
    DG_CHECK(config_.num_pages[g] >= 0 && config_.num_pages[g] < (int64_t{1} << 31));
    Group& grp = groups_[g];
    grp.pages.resize(static_cast<size_t>(config_.num_pages[g]));
    // Lowest page ids first (pop_back).
    for (int64_t p = config_.num_pages[g] - 1; p >= 0; --p) grp.free.push_back(static_cast<int32_t>(p));
  }
}

int64_t BlockManager::first_visible_page(int64_t encoded, KvGroup g) const {
  if (g == KvGroup::kFull) return 0;
  return std::max<int64_t>(0, encoded - config_.sliding_keep) / config_.page_size;
}

int64_t BlockManager::pages_needed(const SequenceBlocks& s, int64_t encoded, int64_t end, KvGroup g) const {
  if (!has_group(g) || end <= encoded) return 0;
  const auto& table = s.tables[static_cast<int>(g)];
  const int64_t last = (end - 1) / config_.page_size;
  int64_t n = 0;
  for (int64_t i = first_visible_page(encoded, g); i <= last; ++i)
    if (i >= static_cast<int64_t>(table.size()) || table[i] < 0) ++n;
  return n;
}

bool BlockManager::can_extend(const SequenceBlocks& s, int64_t encoded, int64_t end) const {
  for (int g = 0; g < kKvGroups; ++g)
    if (pages_needed(s, encoded, end, static_cast<KvGroup>(g)) > free_pages(static_cast<KvGroup>(g))) return false;
  return true;
}

bool BlockManager::extend(SequenceBlocks& s, int64_t encoded, int64_t end) {
  if (!can_extend(s, encoded, end)) return false;
  if (end <= encoded) return true;
  const int64_t last = (end - 1) / config_.page_size;
  for (int g = 0; g < kKvGroups; ++g) {
    if (!has_group(static_cast<KvGroup>(g))) continue;
    auto& table = s.tables[g];
    if (static_cast<int64_t>(table.size()) <= last) table.resize(static_cast<size_t>(last + 1), -1);
    for (int64_t i = first_visible_page(encoded, static_cast<KvGroup>(g)); i <= last; ++i)
      if (table[i] < 0) table[i] = take(groups_[g]);
  }
  return true;
}

void BlockManager::on_encoded(SequenceBlocks& s, std::span<const int32_t> history, int64_t encoded) {
  const int64_t P = config_.page_size;
  DG_CHECK(encoded <= static_cast<int64_t>(history.size()));
  for (int64_t i = static_cast<int64_t>(s.hashes.size()); (i + 1) * P <= encoded; ++i) {
    const PageHash prev = i == 0 ? PageHash{} : s.hashes.back();
    const PageHash h = chain_hash(prev, history.subspan(static_cast<size_t>(i * P), static_cast<size_t>(P)));
    s.hashes.push_back(h);
    if (!config_.prefix_caching) continue;
    for (int g = 0; g < kKvGroups; ++g) {
      const auto& table = s.tables[g];
      if (i >= static_cast<int64_t>(table.size()) || table[i] < 0) continue;
      Group& grp = groups_[g];
      Page& page = grp.pages[table[i]];
      if (page.hashed || grp.cached.count(h)) continue;  // already cached (maybe as another page)
      page.hashed = true;
      page.hash = h;
      grp.cached.emplace(h, table[i]);
    }
  }
  // Sliding pages wholly before the visible window go back to the pool.
  if (has_group(KvGroup::kSliding)) {
    auto& table = s.tables[static_cast<int>(KvGroup::kSliding)];
    const int64_t first = std::min<int64_t>(first_visible_page(encoded, KvGroup::kSliding), table.size());
    for (int64_t i = 0; i < first; ++i)
      if (table[i] >= 0) {
        unref(groups_[static_cast<int>(KvGroup::kSliding)], table[i]);
        table[i] = -1;
      }
  }
}

int64_t BlockManager::share_prefix(SequenceBlocks& s, std::span<const int32_t> history, int64_t max_tokens) {
  if (!config_.prefix_caching) return 0;
  const int64_t P = config_.page_size;
  DG_CHECK(s.hashes.empty() && s.tables[0].empty() && s.tables[1].empty());
  const int64_t kmax = std::min<int64_t>(max_tokens, static_cast<int64_t>(history.size())) / P;
  std::vector<PageHash> chain;
  const Group& full = groups_[static_cast<int>(KvGroup::kFull)];
  const Group& sliding = groups_[static_cast<int>(KvGroup::kSliding)];
  // Full layers: every page of the prefix must be cached.
  int64_t k = 0;
  for (; k < kmax; ++k) {
    const PageHash h = chain_hash(k == 0 ? PageHash{} : chain.back(), history.subspan(static_cast<size_t>(k * P), static_cast<size_t>(P)));
    if (has_group(KvGroup::kFull) && !full.cached.count(h)) break;
    chain.push_back(h);
  }
  // Sliding layers: only the pages of the window before the cut.
  auto sliding_ok = [&](int64_t n) {
    if (!has_group(KvGroup::kSliding)) return true;
    for (int64_t i = first_visible_page(n * P, KvGroup::kSliding); i < n; ++i)
      if (!sliding.cached.count(chain[i])) return false;
    return true;
  };
  while (k > 0 && !sliding_ok(k)) --k;
  if (k == 0) return 0;
  for (int g = 0; g < kKvGroups; ++g) {
    if (!has_group(static_cast<KvGroup>(g))) continue;
    Group& grp = groups_[g];
    auto& table = s.tables[g];
    table.assign(static_cast<size_t>(k), -1);
    for (int64_t i = first_visible_page(k * P, static_cast<KvGroup>(g)); i < k; ++i) {
      const int32_t page = grp.cached.at(chain[i]);
      ref(grp, page);
      table[i] = page;
    }
  }
  s.hashes.assign(chain.begin(), chain.begin() + k);
  return k * P;
}

void BlockManager::free(SequenceBlocks& s) {
  for (int g = 0; g < kKvGroups; ++g) {
    for (int32_t page : s.tables[g])
      if (page >= 0) unref(groups_[g], page);
    s.tables[g].clear();
  }
  s.hashes.clear();
}

int64_t BlockManager::free_pages(KvGroup g) const {
  const Group& grp = groups_[static_cast<int>(g)];
  return static_cast<int64_t>(grp.free.size() + grp.lru.size());
}

int64_t BlockManager::cached_pages(KvGroup g) const {
  return static_cast<int64_t>(groups_[static_cast<int>(g)].cached.size());
}

int32_t BlockManager::take(Group& grp) {
  int32_t page;
  if (!grp.free.empty()) {
    page = grp.free.back();
    grp.free.pop_back();
  } else {
    DG_CHECK(!grp.lru.empty());
    page = grp.lru.front();  // evict the least recently released cached page
    grp.lru.pop_front();
    Page& p = grp.pages[page];
    grp.cached.erase(p.hash);
    p.hashed = false;
  }
  DG_CHECK(grp.pages[page].refs == 0);
  grp.pages[page].refs = 1;
  return page;
}

void BlockManager::drop_unreferenced_cache() {
  for (Group& grp : groups_) {
    for (int32_t page : grp.lru) {
      Page& p = grp.pages[page];
      grp.cached.erase(p.hash);
      p.hashed = false;
      grp.free.push_back(page);
    }
    grp.lru.clear();
  }
}

void BlockManager::ref(Group& grp, int32_t page) {
  Page& p = grp.pages[page];
  if (p.refs == 0) {
    DG_CHECK(p.hashed);
    grp.lru.erase(p.lru);
  }
  ++p.refs;
}

void BlockManager::unref(Group& grp, int32_t page) {
  Page& p = grp.pages[page];
  DG_CHECK(p.refs > 0);
  if (--p.refs > 0) return;
  if (p.hashed) {
    grp.lru.push_back(page);
    p.lru = std::prev(grp.lru.end());
  } else {
    grp.free.push_back(page);
  }
}

}  // namespace dgemma
