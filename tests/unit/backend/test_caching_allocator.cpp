// The caching allocator's bookkeeping (backend/caching_allocator.h) over a fake device: rounding,
// reuse, reserved/peak counts, the ceiling (least recently released blocks go back first, then a
// clear out-of-memory error) and the retry when the device itself is full.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "backend/caching_allocator.h"
#include "util/error.h"

namespace dgemma {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Hands out fake addresses (never dereferenced) up to `capacity` bytes; counts everything.
class FakeDevice final : public BlockSource {
 public:
  explicit FakeDevice(uint64_t capacity) : capacity_(capacity) {}
  void* allocate(size_t bytes) override {
    if (used + bytes > capacity_) return nullptr;
    next_ += bytes + 4096;
    void* p = reinterpret_cast<void*>(next_);
    live[p] = bytes;
    used += bytes;
    return p;
  }
  void free(void* p) override {
    auto it = live.find(p);
    ASSERT_NE(it, live.end()) << "freed a block the device never gave";
    used -= it->second;
    live.erase(it);
    ++frees;
    frees_since_sync_guard += synced_before_free ? 0 : 1;
  }
  void synchronize() override {
    ++syncs;
    synced_before_free = true;
  }
  std::map<void*, uint64_t> live;
  uint64_t used = 0;
  int frees = 0, syncs = 0, frees_since_sync_guard = 0;
  bool synced_before_free = false;

 private:
  uint64_t capacity_;
  uintptr_t next_ = 1 << 20;
};

TEST(CachingAllocator, RoundsToSmallAndLargeGranules) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(kMiB - 1), kMiB) << "below 1 MiB: 512-byte granules (1 MiB - 1 -> 2048 x 512)";
  EXPECT_EQ(CachingAllocator::round_size(kMiB), 2 * kMiB) << "from 1 MiB: 2 MiB granules";
  EXPECT_EQ(CachingAllocator::round_size(5 * kMiB + 1), 6 * kMiB);
}

TEST(CachingAllocator, ReusesReleasedBlocksOfTheSameSizeAndCountsReservedBytes) {
  FakeDevice dev(uint64_t{1} << 40);
  CachingAllocator a(dev);
  size_t b1 = 0, b2 = 0, b3 = 0;
  void* p1 = a.allocate(3 * kMiB, &b1);  // 4 MiB block
  EXPECT_EQ(b1, 4 * kMiB);
  a.release(p1, b1);
  void* p2 = a.allocate(4 * kMiB, &b2);  // same rounded size: the cached block
  EXPECT_EQ(p2, p1);
  EXPECT_EQ(dev.live.size(), 1u);
  void* p3 = a.allocate(7 * kMiB, &b3);  // 8 MiB: new
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.reserved, 12 * kMiB);
  EXPECT_EQ(s.in_use, 12 * kMiB);
  EXPECT_EQ(s.cached, 0u);
  EXPECT_EQ(s.source_allocations, 2u);
  a.release(p2, b2);
  a.release(p3, b3);
  s = a.stats();
  EXPECT_EQ(s.reserved, 12 * kMiB) << "released blocks stay reserved (cached)";
  EXPECT_EQ(s.cached, 12 * kMiB);
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.peak_reserved, 12 * kMiB);
  EXPECT_EQ(s.peak_in_use, 12 * kMiB);
  a.trim();
  EXPECT_EQ(a.stats().reserved, 0u);
  EXPECT_EQ(dev.used, 0u);
  EXPECT_EQ(dev.syncs, 1) << "one synchronisation before the cached blocks go back";
}

// Without a ceiling a cache keyed by size keeps every size a step ever asked for: the footprint is
// the sum over sizes, not the largest step. With one, the oldest cached blocks go back first.
TEST(CachingAllocator, CeilingGivesBackTheOldestCachedBlocksFirst) {
  FakeDevice dev(uint64_t{1} << 40);
  CachingAllocator a(dev);
  a.set_ceiling(20 * kMiB);
  size_t b = 0;
  void* p4 = a.allocate(4 * kMiB, &b);
  a.release(p4, b);  // oldest
  void* p6 = a.allocate(6 * kMiB, &b);
  a.release(p6, b);
  void* p8 = a.allocate(8 * kMiB, &b);
  a.release(p8, b);  // newest; 18 MiB reserved, all cached
  EXPECT_EQ(a.stats().reserved, 18 * kMiB);
  dev.synced_before_free = false;
  // 10 MiB: 18 + 10 > 20, so the 4 MiB (oldest) and the 6 MiB blocks go back: 8 + 10 = 18 <= 20.
  void* p10 = a.allocate(10 * kMiB, &b);
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.reserved, 18 * kMiB);
  EXPECT_EQ(s.cached, 8 * kMiB);
  EXPECT_EQ(s.evictions, 2u);
  EXPECT_EQ(dev.live.count(p4), 0u);
  EXPECT_EQ(dev.live.count(p6), 0u);
  EXPECT_EQ(dev.live.count(p8), 1u) << "the most recently released block stays";
  EXPECT_EQ(dev.frees_since_sync_guard, 0) << "the device was synchronised before any block was freed";
  EXPECT_LE(s.peak_reserved, 20 * kMiB);
  a.release(p10, b);
}

TEST(CachingAllocator, CeilingThrowsAClearErrorWhenTheLiveBlocksDoNotFit) {
  FakeDevice dev(uint64_t{1} << 40);
  CachingAllocator a(dev, "cuda:0");
  a.set_ceiling(10 * kMiB);
  size_t b1 = 0, b2 = 0, b3 = 0;
  void* p1 = a.allocate(6 * kMiB, &b1);  // live
  void* p2 = a.allocate(2 * kMiB, &b2);
  a.release(p2, b2);                     // cached
  try {
    (void)a.allocate(5 * kMiB, &b3);     // 6 MiB block: 6 live + 6 > 10 even with the cache given back
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find("6.0 MiB"), std::string::npos) << m;    // the block
    EXPECT_NE(m.find("12.0 MiB"), std::string::npos) << m;   // where it would take the allocator
    EXPECT_NE(m.find("ceiling of 10.0 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("--gpu-memory-utilization"), std::string::npos) << m;
  }
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.reserved, 6 * kMiB) << "the cached block went back; nothing leaked";
  EXPECT_EQ(s.in_use, 6 * kMiB);
  EXPECT_EQ(dev.used, 6 * kMiB);
  // After the live block goes, the same request fits.
  a.release(p1, b1);
  void* p3 = a.allocate(5 * kMiB, &b3);
  EXPECT_EQ(p3, p1) << "the cached 6 MiB block";
  a.release(p3, b3);
}

TEST(CachingAllocator, LoweringTheCeilingGivesBackCachedBlocksAndResetsThePeaks) {
  FakeDevice dev(uint64_t{1} << 40);
  CachingAllocator a(dev);
  size_t b = 0;
  void* big = a.allocate(30 * kMiB, &b);  // 30 MiB, e.g. a loading temporary
  a.release(big, b);
  void* w = a.allocate(10 * kMiB, &b);    // 10 MiB kept (a weight)
  EXPECT_EQ(a.stats().peak_reserved, 40 * kMiB);
  a.set_ceiling(16 * kMiB);
  AllocatorStats s = a.stats();
  EXPECT_EQ(s.reserved, 10 * kMiB);
  EXPECT_EQ(s.peak_reserved, 10 * kMiB) << "peaks are counted from when the ceiling is set";
  EXPECT_EQ(s.ceiling, 16 * kMiB);
  a.release(w, b);
}

TEST(CachingAllocator, DeviceOutOfMemoryEmptiesTheCacheAndRetriesOnce) {
  FakeDevice dev(16 * kMiB);
  CachingAllocator a(dev);
  size_t b = 0, b2 = 0;
  void* p = a.allocate(10 * kMiB, &b);
  a.release(p, b);  // 10 MiB cached
  void* q = a.allocate(12 * kMiB, &b2);  // the device has 6 MiB free: give the 10 back, retry
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(a.stats().reserved, 12 * kMiB);
  EXPECT_EQ(a.stats().source_allocations, 3u);
  size_t b3 = 0;
  try {
    (void)a.allocate(8 * kMiB, &b3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("cannot allocate 8.0 MiB"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.stats().reserved, 12 * kMiB);
  a.release(q, b2);
}

}  // namespace
}  // namespace dgemma

namespace dgemma {
namespace {

// The graph pool (CUDA graph recordings): its blocks serve only recordings, come back to it whenever
// they are released, are reused best-fit by later recordings, never evicted nor trimmed, and a
// recording over the ceiling fails without a synchronisation (none may happen while one records).
TEST(CachingAllocatorGraphPool, BlocksStayInThePoolAndAreReusedBestFit) {
  FakeDevice dev(1024 * kMiB);
  CachingAllocator a(dev);
  size_t s1 = 0, s2 = 0, s3 = 0, n = 0;
  a.begin_graph_pool();
  void* big = a.allocate(8 * kMiB, &s1);
  void* small = a.allocate(2 * kMiB, &s2);
  a.release(big, s1);  // released inside the recording: back to the pool
  void* again = a.allocate(6 * kMiB, &s3);
  EXPECT_EQ(again, big) << "a larger free pool block serves a smaller request";
  EXPECT_EQ(s3, 8 * kMiB) << "the block's real size comes back, for its release";
  a.end_graph_pool();
  EXPECT_EQ(a.stats().graph_pool, 10 * kMiB);
  EXPECT_EQ(a.stats().reserved, 10 * kMiB);
  a.release(again, s3);
  a.release(small, s2);  // released after the recording: still the pool's
  void* other = a.allocate(8 * kMiB, &n);
  EXPECT_NE(other, big) << "an allocation outside a recording never gets a pool block";
  a.release(other, n);
  a.trim();
  EXPECT_EQ(a.stats().graph_pool, 10 * kMiB) << "trim leaves the pool";
  EXPECT_EQ(dev.live.count(big), 1u);
  EXPECT_EQ(dev.live.count(other), 0u);
  a.begin_graph_pool();  // a second recording reuses the first's blocks
  void* r1 = a.allocate(7 * kMiB, &s1);
  void* r2 = a.allocate(1 * kMiB, &s2);
  a.end_graph_pool();
  EXPECT_EQ(r1, big);
  EXPECT_EQ(r2, small);
  EXPECT_EQ(a.stats().graph_pool, 10 * kMiB) << "nothing new taken";
  a.release(r1, s1);
  a.release(r2, s2);
}

TEST(CachingAllocatorGraphPool, OverTheCeilingFailsWithoutEvictingOrSynchronising) {
  FakeDevice dev(1024 * kMiB);
  CachingAllocator a(dev);
  size_t s = 0;
  void* cached = a.allocate(8 * kMiB, &s);
  a.release(cached, s);  // a cached general block that eviction would give back
  a.set_ceiling(16 * kMiB);
  const int syncs = dev.syncs;
  a.begin_graph_pool();
  size_t s1 = 0;
  void* p = a.allocate(6 * kMiB, &s1);  // 8 cached + 6 <= 16
  try {
    size_t s2 = 0;
    a.allocate(4 * kMiB, &s2);
    ADD_FAILURE() << "expected an out-of-memory error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kResourceExhausted);
    EXPECT_NE(std::string(e.what()).find("recording a CUDA graph"), std::string::npos) << e.what();
  }
  a.end_graph_pool();
  EXPECT_EQ(dev.syncs, syncs) << "no synchronisation while recording";
  EXPECT_EQ(dev.live.count(cached), 1u) << "no eviction while recording";
  a.release(p, s1);
}

}  // namespace
}  // namespace dgemma
