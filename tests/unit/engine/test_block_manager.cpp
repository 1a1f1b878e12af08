// The KV pool's page bookkeeping: allocation per group, the sliding ring (pages released as the
// window moves on), reference counts, the prefix cache's chain hashes and LRU eviction.
#include <gtest/gtest.h>

#include <numeric>

#include "engine/block_manager.h"

namespace dgemma {
namespace {

constexpr int kFull = static_cast<int>(KvGroup::kFull), kSliding = static_cast<int>(KvGroup::kSliding);

BlockManagerConfig config(int64_t full, int64_t sliding, bool prefix = true) {
  BlockManagerConfig c;
  c.page_size = 4;
  c.num_pages = {full, sliding};
  c.sliding_keep = 5;  // window 6
  c.prefix_caching = prefix;
  return c;
}

std::vector<int32_t> tokens(int n, int base = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), base);
  return v;
}

int resident(const std::vector<int32_t>& table) {
  int n = 0;
  for (int32_t p : table) n += p >= 0;
  return n;
}

TEST(BlockManager, FullLayersKeepEveryPageSlidingLayersARing) {
  BlockManager bm(config(16, 16));
  SequenceBlocks s;
  const auto h = tokens(30);
  int64_t encoded = 0;
  for (int64_t chunk : {7, 9, 4, 10}) {
    ASSERT_TRUE(bm.extend(s, encoded, encoded + chunk));
    encoded += chunk;
    bm.on_encoded(s, h, encoded);
    // Full: pages 0 .. ceil(encoded / 4) - 1, all resident.
    EXPECT_EQ(resident(s.tables[kFull]), (encoded + 3) / 4);
    // Sliding: only the pages holding positions >= encoded - 5.
    const int64_t first = std::max<int64_t>(0, encoded - 5) / 4;
    for (int64_t i = 0; i < static_cast<int64_t>(s.tables[kSliding].size()); ++i)
      EXPECT_EQ(s.tables[kSliding][i] >= 0, i >= first) << "encoded " << encoded << " page " << i;
  }
  EXPECT_EQ(bm.used_pages(KvGroup::kFull), 8);
  EXPECT_LE(bm.used_pages(KvGroup::kSliding), 3);
  bm.free(s);
  EXPECT_EQ(bm.free_pages(KvGroup::kFull), 16);
  EXPECT_EQ(bm.free_pages(KvGroup::kSliding), 16);
}

TEST(BlockManager, ExtendIsAllOrNothing) {
  BlockManager bm(config(3, 16));
  SequenceBlocks s;
  EXPECT_TRUE(bm.extend(s, 0, 12));        // 3 pages
  EXPECT_FALSE(bm.extend(s, 12, 13));      // a fourth: none left
  EXPECT_EQ(s.tables[kFull].size(), 3u);   // unchanged
  EXPECT_EQ(bm.free_pages(KvGroup::kFull), 0);
}

TEST(BlockManager, SharedPrefixIsReusedAndCounted) {
  BlockManager bm(config(32, 32));
  const auto h = tokens(22);
  SequenceBlocks a;
  ASSERT_TRUE(bm.extend(a, 0, 22));
  const auto sliding_before = a.tables[kSliding];
  bm.on_encoded(a, h, 22);
  EXPECT_EQ(a.hashes.size(), 5u);  // 5 complete pages
  EXPECT_LT(a.tables[kSliding][3], 0) << "page 3 left a's window (positions >= 17)";
  SequenceBlocks b;
  const int64_t hit = bm.share_prefix(b, h, 21);
  EXPECT_EQ(hit, 20);  // 5 pages of 4
  for (int i = 0; i < 5; ++i) EXPECT_EQ(b.tables[kFull][i], a.tables[kFull][i]) << "page " << i;
  // Sliding: only the window before the cut (positions >= 15) is shared, from the cache even where a
  // has released it; earlier entries are absent.
  EXPECT_LT(b.tables[kSliding][2], 0);
  EXPECT_EQ(b.tables[kSliding][3], sliding_before[3]);
  EXPECT_EQ(b.tables[kSliding][4], a.tables[kSliding][4]);
  // A different token anywhere in a page breaks the chain from there on.
  auto other = h;
  other[9] = 7;
  SequenceBlocks c;
  EXPECT_EQ(bm.share_prefix(c, other, 21), 8);
  bm.free(a);
  bm.free(b);
  bm.free(c);
  EXPECT_EQ(bm.free_pages(KvGroup::kFull), 32) << "cached pages count as free (evictable)";
  EXPECT_GT(bm.cached_pages(KvGroup::kFull), 0);
  // Released pages stay cached: a new sequence still finds them.
  SequenceBlocks d;
  EXPECT_EQ(bm.share_prefix(d, h, 21), 20);
  bm.free(d);
}

TEST(BlockManager, SlidingWindowPagesMustAllBeCachedForAHit) {
  BlockManager bm(config(32, 32));
  const auto h = tokens(22);
  SequenceBlocks a;
  for (int64_t e = 0; e < 22; e += 2) {  // encoded two tokens at a time: early sliding pages released
    ASSERT_TRUE(bm.extend(a, e, e + 2));
    bm.on_encoded(a, h, e + 2);
  }
  bm.free(a);
  // Evict the sliding pages by filling the sliding group with another sequence.
  SequenceBlocks filler;
  ASSERT_TRUE(bm.extend(filler, 0, 4 * 30));
  SequenceBlocks b;
  EXPECT_EQ(bm.share_prefix(b, h, 21), 0) << "full pages alone do not make a hit: the window is gone";
  bm.free(filler);
  bm.free(b);
}

TEST(BlockManager, LruEvictsTheOldestReleasedPageFirst) {
  BlockManager bm(config(4, 8));
  const auto h1 = tokens(8, 100), h2 = tokens(8, 500);
  SequenceBlocks a, b;
  ASSERT_TRUE(bm.extend(a, 0, 8));
  bm.on_encoded(a, h1, 8);
  bm.free(a);  // h1's two pages cached, released first
  ASSERT_TRUE(bm.extend(b, 0, 8));
  bm.on_encoded(b, h2, 8);
  bm.free(b);  // h2's two pages cached
  SequenceBlocks c;
  ASSERT_TRUE(bm.extend(c, 0, 8));  // needs 2 of 4: evicts h1's (released earlier)
  SequenceBlocks d;
  EXPECT_EQ(bm.share_prefix(d, h2, 8), 8) << "the most recently released prefix survives";
  SequenceBlocks e;
  EXPECT_EQ(bm.share_prefix(e, h1, 8), 0) << "the older one was evicted";
  bm.free(c);
  bm.free(d);
  bm.free(e);
}

TEST(BlockManager, DropUnreferencedCacheKeepsPagesInUse) {
  BlockManager bm(config(16, 16));
  const auto h = tokens(12);
  SequenceBlocks a, b;
  ASSERT_TRUE(bm.extend(a, 0, 12));
  bm.on_encoded(a, h, 12);
  ASSERT_TRUE(bm.extend(b, 0, 8));
  bm.on_encoded(b, tokens(8, 500), 8);
  bm.free(a);  // a's pages: cached, unreferenced; b's: cached and in use
  bm.drop_unreferenced_cache();
  SequenceBlocks c;
  EXPECT_EQ(bm.share_prefix(c, h, 12), 0) << "a's prompt is forgotten";
  SequenceBlocks d;
  EXPECT_EQ(bm.share_prefix(d, tokens(8, 500), 8), 8) << "b's pages are still referenced and cached";
  bm.free(b);
  bm.free(c);
  bm.free(d);
  EXPECT_EQ(bm.free_pages(KvGroup::kFull), 16);
}

TEST(BlockManager, PrefixCachingOffSharesNothing) {
  BlockManager bm(config(16, 16, /*prefix=*/false));
  const auto h = tokens(12);
  SequenceBlocks a, b;
  ASSERT_TRUE(bm.extend(a, 0, 12));
  bm.on_encoded(a, h, 12);
  EXPECT_EQ(bm.share_prefix(b, h, 12), 0);
  EXPECT_EQ(bm.cached_pages(KvGroup::kFull), 0);
}

TEST(ChainHash, DependsOnEveryEarlierToken) {
  const auto t = tokens(4);
  const PageHash a = chain_hash({}, t);
  EXPECT_EQ(a, chain_hash({}, t));
  EXPECT_FALSE(chain_hash(a, t) == a);
  auto u = t;
  u[3] += 1;
  EXPECT_FALSE(chain_hash({}, u) == a);
}

}  // namespace
}  // namespace dgemma
