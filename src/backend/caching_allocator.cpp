#include "backend/caching_allocator.h"

#include <algorithm>
#include <iterator>

#include "util/error.h"
#include "util/log.h"

namespace dgemma {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
// With a ceiling, a new peak of reserved bytes is logged once it is this far above the last one
// logged (what a run's log shows of its real high-water mark).
constexpr uint64_t kPeakLogStep = uint64_t{256} << 20;

}  // namespace

CachingAllocator::CachingAllocator(BlockSource& source, std::string name) : source_(source), name_(std::move(name)) {}

CachingAllocator::~CachingAllocator() {
  for (auto& [size, c] : free_) source_.free(c.p);
  for (auto& [size, p] : pool_free_) source_.free(p);
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) return kSmallGranule;
  const size_t g = bytes < kLargeFrom ? kSmallGranule : kLargeGranule;
  return (bytes + g - 1) / g * g;
}

void CachingAllocator::note_peak_locked() {
  s_.peak_in_use = std::max(s_.peak_in_use, s_.in_use);
  if (s_.reserved <= s_.peak_reserved) return;
  s_.peak_reserved = s_.reserved;
  if (s_.ceiling > 0 && s_.peak_reserved >= logged_peak_ + kPeakLogStep) {
    logged_peak_ = s_.peak_reserved;
    DG_LOG_INFO("memory", "{}: new peak of {:.0f} MiB reserved by the allocator (ceiling {:.0f} MiB, {:.0f} MiB in use, "
                "{} cached blocks given back so far)", name_, s_.peak_reserved / kMiB, s_.ceiling / kMiB, s_.in_use / kMiB,
                s_.evictions);
  }
}

void CachingAllocator::evict_locked(BySize::iterator it) {
  const size_t size = it->first;
  age_.erase(it->second.stamp);
  source_.free(it->second.p);
  free_.erase(it);
  ++s_.source_frees;
  s_.cached -= size;
  s_.reserved -= size;
}

void CachingAllocator::trim_locked() {
  if (free_.empty()) return;
  source_.synchronize();
  while (!free_.empty()) evict_locked(free_.begin());
}

void* CachingAllocator::allocate_from_pool_locked(size_t size, size_t* block_bytes) {
  auto it = pool_free_.lower_bound(size);
  if (it != pool_free_.end()) {
    void* p = it->second;
    *block_bytes = it->first;
    s_.in_use += it->first;
    pool_free_.erase(it);
    note_peak_locked();
    return p;
  }
  if (s_.ceiling > 0 && s_.reserved + size > s_.ceiling)
    fail(ErrorKind::kResourceExhausted,
         "{}: out of memory under the memory plan's ceiling while recording a CUDA graph: a block of {:.1f} MiB would "
         "take the allocator to {:.1f} MiB, over its ceiling of {:.1f} MiB (the graph pool holds {:.1f} MiB)",
         name_, size / kMiB, (s_.reserved + size) / kMiB, s_.ceiling / kMiB, s_.graph_pool / kMiB);
  void* p = source_.allocate(size);
  ++s_.source_allocations;
  if (p == nullptr)
    fail(ErrorKind::kResourceExhausted, "{}: out of memory while recording a CUDA graph: cannot allocate {:.1f} MiB",
         name_, size / kMiB);
  pool_blocks_.insert(p);
  *block_bytes = size;
  s_.reserved += size;
  s_.graph_pool += size;
  s_.in_use += size;
  note_peak_locked();
  return p;
}

void CachingAllocator::begin_graph_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  DG_CHECK(!pool_mode_);
  pool_mode_ = true;
}

void CachingAllocator::end_graph_pool() {
  std::lock_guard<std::mutex> lock(mu_);
  pool_mode_ = false;
}

void* CachingAllocator::allocate(size_t bytes, size_t* block_bytes) {
  const size_t size = round_size(bytes);
  *block_bytes = size;
  std::lock_guard<std::mutex> lock(mu_);
  if (pool_mode_) return allocate_from_pool_locked(size, block_bytes);
  auto [lo, hi] = free_.equal_range(size);
  if (lo != hi) {  // the most recently released block of this size (warmest in L2)
    auto it = std::prev(hi);
    void* p = it->second.p;
    age_.erase(it->second.stamp);
    free_.erase(it);
    s_.cached -= size;
    s_.in_use += size;
    note_peak_locked();
    return p;
  }
  if (s_.ceiling > 0 && s_.reserved + size > s_.ceiling) {
    // No cached block has this size: give back the ones released longest ago until it fits.
    if (!age_.empty()) source_.synchronize();
    while (s_.reserved + size > s_.ceiling && !age_.empty()) {
      evict_locked(age_.begin()->second);
      ++s_.evictions;
    }
    if (s_.reserved + size > s_.ceiling)
      fail(ErrorKind::kResourceExhausted,
           "{}: out of memory under the memory plan's ceiling: a block of {:.1f} MiB would take the allocator to "
           "{:.1f} MiB, over its ceiling of {:.1f} MiB ({:.1f} MiB in use, nothing cached left to give back); this "
           "step needs more than the plan allows for activations: lower --max-num-batched-tokens or --max-num-seqs, or "
           "raise --gpu-memory-utilization",
           name_, size / kMiB, (s_.reserved + size) / kMiB, s_.ceiling / kMiB, s_.in_use / kMiB);
  }
  void* p = source_.allocate(size);
  ++s_.source_allocations;
  if (p == nullptr) {  // the device itself is full (other processes, fragmentation): give the cache back, retry once
    trim_locked();
    p = source_.allocate(size);
    ++s_.source_allocations;
    if (p == nullptr)
      fail(ErrorKind::kResourceExhausted, "{}: out of memory: cannot allocate {:.1f} MiB ({:.1f} MiB reserved by dgemma, {:.1f} MiB in use)",
           name_, size / kMiB, s_.reserved / kMiB, s_.in_use / kMiB);
  }
  s_.reserved += size;
  s_.in_use += size;
  note_peak_locked();
  return p;
}

void CachingAllocator::release(void* p, size_t block_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pool_blocks_.count(p) != 0) {
    pool_free_.emplace(block_bytes, p);
    s_.in_use -= block_bytes;
    return;
  }
  const uint64_t stamp = next_stamp_++;
  auto it = free_.emplace(block_bytes, Cached{p, stamp});
  age_.emplace(stamp, it);
  s_.in_use -= block_bytes;
  s_.cached += block_bytes;
}

void CachingAllocator::set_ceiling(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.ceiling = bytes;
  if (bytes > 0 && s_.reserved > bytes) {
    if (!age_.empty()) source_.synchronize();
    while (s_.reserved > bytes && !age_.empty()) {
      evict_locked(age_.begin()->second);
      ++s_.evictions;
    }
  }
  s_.peak_reserved = s_.reserved;
  s_.peak_in_use = s_.in_use;
  logged_peak_ = s_.reserved;
}

void CachingAllocator::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  trim_locked();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  s_.peak_reserved = s_.reserved;
  s_.peak_in_use = s_.in_use;
}

}  // namespace dgemma
