#pragma once
// State shared by the CUDA backend's host code: the device, its one stream (with the counters of its
// work, the kernels' occupancy answers and TMA descriptors), the kernel choices, the cuBLAS handle, the caching
// allocator and the device error word. Host C++ only (no kernels here).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>

#include "backend/backend.h"
#include "backend/caching_allocator.h"
#include "backend/cuda/core/stream.h"
#include "backend/cuda/core/tma_map.h"
#include "backend/cuda_options.h"

namespace dgemma::cuda {

// The caching device allocator: the bookkeeping of backend/caching_allocator.h (rounding, reuse,
// reserved/peak counts, the memory plan's ceiling) over cudaMalloc / cudaFree. Every op of the
// backend runs on one stream, so a block freed on the host while kernels that use it are still
// queued can be handed out again at once: later work on the same stream is ordered after those
// kernels. Before cached blocks go back to the driver the device is synchronised. Thread-safe.
// Lives as long as any tensor it handed out.
class DeviceAllocator {
 public:
  explicit DeviceAllocator(int device);
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // A block of at least `bytes` (never null, even for 0 bytes); `rounded` receives its real size.
  // Out of memory (the device's or the ceiling's): Error(kResourceExhausted) with the numbers.
  void* allocate(size_t bytes, size_t* rounded);
  void release(void* p, size_t rounded);
  void trim();  // frees every cached block
  // Graph recordings take their memory from the graph pool (caching_allocator.h).
  void begin_graph_pool() { cache_.begin_graph_pool(); }
  void end_graph_pool() { cache_.end_graph_pool(); }
  void set_ceiling(uint64_t bytes) { cache_.set_ceiling(bytes); }
  AllocatorStats stats() const { return cache_.stats(); }
  size_t bytes_in_use() const { return cache_.stats().in_use; }
  size_t bytes_cached() const { return cache_.stats().cached; }

 private:
  class Source final : public BlockSource {
   public:
    explicit Source(int device) : device_(device) {}
    void* allocate(size_t bytes) override;
    void free(void* p) override;
    void synchronize() override;

   private:
    int device_;
  };
  Source source_;
  CachingAllocator cache_;  // after source_: destroyed first, giving its blocks back through it
};

// Host-to-device copies of small host buffers without a stream synchronisation: the bytes are first
// copied into a pinned ring (so the caller may reuse its buffer at once), then copied to the device
// asynchronously on the stream, ordered with the kernels around them. A wrap of the ring waits for the
// copies still reading from it (the event of the latest one); larger buffers take the synchronous path.
class StagingRing {
 public:
  explicit StagingRing(size_t bytes);
  ~StagingRing();
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;
  // false: too large for the ring (the caller copies synchronously).
  bool copy_to_device(void* dst, const void* src, size_t n, cudaStream_t stream);

 private:
  std::mutex mu_;
  unsigned char* base_ = nullptr;
  size_t size_ = 0, head_ = 0;
  cudaEvent_t last_ = nullptr;
  bool pending_ = false;
};

struct Context {
  int device = 0;
  // The kernel choices, the family resolved (kHopper or kPortable; make_cuda_backend checks the device).
  CudaOptions options;
  mutable WorkCounters counters;  // counted by const ops too (a launch, a wait)
  mutable Occupancy occupancy;
  mutable TmaMaps tma_maps;  // the TMA descriptors of its launches, encoded once
  Stream stream;  // every op's launches: the CUDA stream, &counters, &occupancy, &tma_maps
  cublasHandle_t cublas = nullptr;
  void* cublas_workspace = nullptr;
  size_t cublas_workspace_bytes = 0;
  std::shared_ptr<DeviceAllocator> allocator;
  unsigned* error_host = nullptr;  // pinned, mapped word the kernels set bits in (core/error_bits.h)
  unsigned* error_dev = nullptr;   // its device address
  // A device word that is zero between kernels: the ticket of kernels whose last block finishes the
  // work and sets it back to zero (moe/route.cuh launch_moe_route_group). Ops run on one stream, in order.
  unsigned* ticket = nullptr;
  std::unique_ptr<StagingRing> staging;  // asynchronous small host-to-device copies

  Context(int device_index, const CudaOptions& resolved);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // An owning device tensor. The memory is NOT zeroed (every op writes its whole output).
  Tensor alloc(ScalarType type, std::initializer_list<int64_t> dims) const;
  Tensor alloc_shape(ScalarType type, const int64_t* dims, int ndim) const;
  // Waits for the stream, then throws if a kernel reported bad input in the error word.
  void sync() const;
  // n bytes of host memory to device memory in stream order: small buffers asynchronously through the
  // staging ring (the caller may reuse src at once), larger ones with a synchronisation. Refused while
  // the stream is being captured into a graph: the graph would copy whatever the ring holds at replay.
  void upload_small(void* dst, const void* src, size_t n) const;
  // Whether the stream is being captured into a CUDA graph.
  bool capturing() const;
  void check_error_word() const;
  bool hopper() const { return options.family == KernelFamily::kHopper; }
};

// A contiguous row-major bf16 GEMM, possibly strided-batched, on cuBLAS with fp32 accumulation:
//   C[b] (M x N) = A[b] (M x K) . op(B[b]) (+ beta * C[b]),
// op(B) = B^T when B is stored [N, K] (b_nk, the weight layout), B when stored [K, N].
// Leading dimensions and strides are in elements. C is bf16 (rounded once from the fp32 accumulator)
// or fp32 (c_f32).
struct Gemm {
  const uint16_t* a = nullptr;
  int64_t lda = 0, stride_a = 0;
  const uint16_t* b = nullptr;
  int64_t ldb = 0, stride_b = 0;
  bool b_nk = true;
  void* c = nullptr;
  int64_t ldc = 0, stride_c = 0;
  bool c_f32 = false;
  int64_t M = 0, N = 0, K = 0;
  int64_t batch = 1;
  float beta = 0.0f;
};
void gemm(const Context& ctx, const Gemm& g);

// Checks used by every op.
void need_cuda(const Tensor& t, const char* op, const char* what);
void need_type(const Tensor& t, ScalarType type, const char* op, const char* what);
// The bf16 tensor of a weight; quantised weights reach the kernels only through upload_weight,
// which (for now) dequantises them to bf16, so anything else is an internal error.
const Tensor& bf16_weight(const Weight& w, const char* op, const char* what);

}  // namespace dgemma::cuda
