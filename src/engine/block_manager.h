#pragma once
// Page bookkeeping of the paged KV pool (no tensors: the scheduler and its tests use it without a
// model). Pages hold page_size tokens (= canvas_length, so a committed canvas is one page when the
// prompt is page-aligned). There are two groups of pages, one per kind of layer (model/kv_view.h):
// full-attention layers keep every page of a sequence; sliding layers need only the pages that cover
// the last window-1 positions, so older ones are released as the sequence grows (a ring of pages,
// no memmove).
//
// Prefix caching (vLLM's scheme): every complete page of a sequence's token history (prompt, then
// committed canvases) gets a chain hash — SHA-256 of the previous page's hash and the page's tokens —
// and is entered in a per-group table. A later sequence whose history starts with the same pages
// shares them (reference counts) instead of encoding them again. A page whose count drops to zero
// stays cached, in LRU order, until its memory is needed.
#include <array>
#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/kv_view.h"

namespace dgemma {

struct PageHash {
  uint64_t hi = 0, lo = 0;
  bool operator==(const PageHash& o) const { return hi == o.hi && lo == o.lo; }
};
struct PageHashHasher {
  size_t operator()(const PageHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull)); }
};
// The hash of the page `tokens` after a page whose hash is `prev` (the first page: prev = {}).
PageHash chain_hash(const PageHash& prev, std::span<const int32_t> tokens);

// The pages one sequence holds.
struct SequenceBlocks {
  std::array<std::vector<int32_t>, kKvGroups> tables;  // logical page (position / P) -> page id, -1: none
  std::vector<PageHash> hashes;                        // chain hashes of its complete pages, in order
};

struct BlockManagerConfig {
  int64_t page_size = 256;
  std::array<int64_t, kKvGroups> num_pages{};  // 0 for a group without layers
  int64_t sliding_keep = 0;                    // positions a sliding layer sees (window - 1)
  bool prefix_caching = true;
};

class BlockManager {
 public:
  explicit BlockManager(BlockManagerConfig config);

  const BlockManagerConfig& config() const { return config_; }
  int64_t page_size() const { return config_.page_size; }
  bool has_group(KvGroup g) const { return config_.num_pages[static_cast<int>(g)] > 0; }

  // Pages of group g to allocate so that positions [encoded, end) can be written and read with the
  // visible cache before them.
  int64_t pages_needed(const SequenceBlocks& s, int64_t encoded, int64_t end, KvGroup g) const;
  bool can_extend(const SequenceBlocks& s, int64_t encoded, int64_t end) const;
  // Allocates those pages in every group; returns false (and changes nothing) when one runs short.
  bool extend(SequenceBlocks& s, int64_t encoded, int64_t end);
  // The sequence's cache now holds the first `encoded` tokens of `history`: its newly complete pages
  // enter the prefix cache and sliding pages no longer visible are released.
  void on_encoded(SequenceBlocks& s, std::span<const int32_t> history, int64_t encoded);
  // At admission: shares the longest cached run of complete pages that starts `history`, at most
  // max_tokens tokens, and returns its length in tokens (a multiple of page_size).
  int64_t share_prefix(SequenceBlocks& s, std::span<const int32_t> history, int64_t max_tokens);
  // Releases every page of the sequence (cached ones stay in the prefix cache).
  void free(SequenceBlocks& s);
  // Forgets every unreferenced cached page (they become free pages): the engine's start-up warm-up
  // leaves no prompt of its own in the prefix cache.
  void drop_unreferenced_cache();

  int64_t free_pages(KvGroup g) const;   // never used, released or evictable cached pages
  int64_t total_pages(KvGroup g) const { return config_.num_pages[static_cast<int>(g)]; }
  int64_t used_pages(KvGroup g) const { return total_pages(g) - free_pages(g); }
  int64_t cached_pages(KvGroup g) const;  // pages in the prefix cache (referenced or not)

 private:
  struct Page {
    int32_t refs = 0;
    bool hashed = false;
    PageHash hash;
    std::list<int32_t>::iterator lru;  // valid when refs == 0 && hashed
  };
  struct Group {
    std::vector<Page> pages;
    std::vector<int32_t> free;  // unhashed, unreferenced
    std::list<int32_t> lru;     // hashed, unreferenced: least recently released first
    std::unordered_map<PageHash, int32_t, PageHashHasher> cached;
  };
  int64_t first_visible_page(int64_t encoded, KvGroup g) const;
  int32_t take(Group& grp);
  void ref(Group& grp, int32_t page);
  void unref(Group& grp, int32_t page);

  BlockManagerConfig config_;
  std::array<Group, kKvGroups> groups_;
};

}  // namespace dgemma
