#pragma once
// The bookkeeping of the caching device allocator, apart from the device: blocks come from and go
// back to a BlockSource (cudaMalloc / cudaFree in the CUDA backend, a fake in the tests), so the
// rules below are tested without a GPU.
//
// Rules:
//  * sizes are rounded (512-byte granules below 1 MiB; 2 MiB above, the driver's page, so that what
//    is counted is what the device gives) and a released block is kept for a later request of the
//    same rounded size (a forward pass asks for the same sizes every layer and every step);
//  * reserved bytes (blocks taken from the source: in use + cached) and their peak are tracked;
//  * with a ceiling, an allocation that would take the reserved bytes over it first gives cached
//    blocks back to the source, least recently released first, and only if it still does not fit
//    throws Error(kResourceExhausted) with the numbers. Without this, blocks of every size a step
//    ever asked for stay cached for good and the footprint grows past any plan;
//  * when the source itself is out of memory, every cached block goes back and the request is
//    retried once;
//  * the graph pool: while a CUDA graph is being recorded (begin_graph_pool .. end_graph_pool) every
//    block comes from the pool — the best-fitting free pool block (a larger block serves a smaller
//    request, so recordings of smaller steps reuse a larger one's blocks), else a new block from the
//    source, never by evicting (no synchronisation may happen while a recording runs) — and pool
//    blocks go back to the pool whenever they are released, never to other allocations: the recorded
//    graphs write them at every replay. The pool is never trimmed.
// Thread-safe (tensors may be released from any thread).
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_set>

namespace dgemma {

class BlockSource {
 public:
  virtual ~BlockSource() = default;
  virtual void* allocate(size_t bytes) = 0;  // nullptr: the device is out of memory
  virtual void free(void* p) = 0;
  // Called once before cached blocks are freed: work still queued that reads them must finish.
  virtual void synchronize() {}
};

struct AllocatorStats {
  uint64_t reserved = 0;  // bytes of the blocks taken from the source (in use + cached)
  uint64_t peak_reserved = 0;
  uint64_t in_use = 0;    // bytes of the blocks handed out
  uint64_t peak_in_use = 0;
  uint64_t cached = 0;    // bytes of the free blocks kept for reuse
  uint64_t ceiling = 0;   // 0: none
  uint64_t source_allocations = 0, source_frees = 0;  // calls to the source
  uint64_t evictions = 0;  // cached blocks given back to stay under the ceiling
  uint64_t graph_pool = 0;  // bytes of the graph pool's blocks (part of reserved)
};

class CachingAllocator {
 public:
  explicit CachingAllocator(BlockSource& source, std::string name = "device");
  ~CachingAllocator();  // gives the cached blocks back (no synchronisation: the process is ending)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (never null, even for 0 bytes); `block_bytes` receives its size,
  // which release() takes back.
  void* allocate(size_t bytes, size_t* block_bytes);
  void release(void* p, size_t block_bytes);
  // 0: no ceiling. A ceiling below what is reserved now gives cached blocks back at once.
  void set_ceiling(uint64_t bytes);
  void trim();  // every cached block back to the source (not the graph pool's)
  // Allocations between these come from the graph pool (see the rules above); not nested.
  void begin_graph_pool();
  void end_graph_pool();
  AllocatorStats stats() const;
  void reset_peaks();  // the peaks start again from the current values

  static size_t round_size(size_t bytes);
  static constexpr size_t kSmallGranule = 512, kLargeGranule = size_t{2} << 20, kLargeFrom = size_t{1} << 20;

 private:
  struct Cached {
    void* p;
    uint64_t stamp;  // release order: the oldest go back first
  };
  using BySize = std::multimap<size_t, Cached>;
  void evict_locked(BySize::iterator it);
  void* allocate_from_pool_locked(size_t size, size_t* block_bytes);
  void trim_locked();
  void note_peak_locked();

  BlockSource& source_;
  std::string name_;
  mutable std::mutex mu_;
  BySize free_;                                // by size
  std::map<uint64_t, BySize::iterator> age_;   // by release stamp
  uint64_t next_stamp_ = 0;
  AllocatorStats s_;
  uint64_t logged_peak_ = 0;  // with a ceiling: the last peak logged
  bool pool_mode_ = false;
  std::unordered_set<void*> pool_blocks_;   // every graph-pool block
  std::multimap<size_t, void*> pool_free_;  // the free ones, by size
};

}  // namespace dgemma
