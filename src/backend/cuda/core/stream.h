#pragma once
// The stream a CUDA backend enqueues every op on, as its launchers take it: the CUDA stream, the
// counters of the backend's device work (Backend::work_stats), the occupancy answers of its kernels
// and its TMA descriptors (core/tma_map.h). Host C++ (C++17: the .cu launchers include it); owned by the backend's Context.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

namespace dgemma::cuda {

// Launches, host waits and their time, counted by the backend's own launches and waits.
class WorkCounters {
 public:
  void count_launch() { launches_.fetch_add(1, std::memory_order_relaxed); }
  void count_sync(uint64_t waited_ns) {
    syncs_.fetch_add(1, std::memory_order_relaxed);
    wait_ns_.fetch_add(waited_ns, std::memory_order_relaxed);
  }
  // More host time spent waiting inside a counted wait (a copy into pageable memory blocks in the copy
  // call itself, before its synchronisation).
  void add_wait(uint64_t waited_ns) { wait_ns_.fetch_add(waited_ns, std::memory_order_relaxed); }
  uint64_t launches() const { return launches_.load(std::memory_order_relaxed); }
  uint64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }
  uint64_t wait_ns() const { return wait_ns_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> launches_{0}, syncs_{0}, wait_ns_{0};
};

// What the occupancy calculator says about the backend's kernels on its device, asked once per
// (kernel, block size, dynamic shared memory). Thread-safe.
class Occupancy {
 public:
  explicit Occupancy(int device);
  int device() const { return device_; }
  int sm_count() const { return sm_count_; }
  // Blocks of `kernel` one SM holds with `threads` threads and `smem` bytes of dynamic shared memory:
  // 0 when the device offers less shared memory than that. Past 48 KB it first allows the kernel that
  // much (cudaFuncAttributeMaxDynamicSharedMemorySize), which its launches need too.
  int resident_blocks(const void* kernel, int threads, size_t smem);

 private:
  int device_ = 0, sm_count_ = 1;
  size_t smem_optin_ = 0;
  std::mutex mu_;
  std::map<std::tuple<const void*, int, size_t>, int> known_;
};

class TmaMaps;  // core/tma_map.h: the backend's TMA descriptors

struct Stream {
  cudaStream_t handle = nullptr;
  WorkCounters* counters = nullptr;
  Occupancy* occupancy = nullptr;
  TmaMaps* tma_maps = nullptr;
  operator cudaStream_t() const { return handle; }  // NOLINT: a kernel launch's stream argument
  void count_launch() const {
    if (counters != nullptr) counters->count_launch();
  }
};

// Blocks for a kernel that loops over `items` (rows, tokens) with a grid of blocks all resident at
// once: the blocks one SM holds (at least one) times the SMs, and no more blocks than items.
template <typename... Params>
unsigned resident_grid(const Stream& stream, void (*kernel)(Params...), int threads, size_t smem,
                       int64_t items) {
  const int per_sm = stream.occupancy->resident_blocks(reinterpret_cast<const void*>(kernel), threads, smem);
  const int64_t slots = int64_t{per_sm > 1 ? per_sm : 1} * stream.occupancy->sm_count();
  const int64_t grid = items < slots ? items : slots;
  return static_cast<unsigned>(grid > 1 ? grid : 1);
}

}  // namespace dgemma::cuda
