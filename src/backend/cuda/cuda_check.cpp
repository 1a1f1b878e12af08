#include "backend/cuda/cuda_check.h"

#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <atomic>

#include "backend/cuda/tuning.h"
#include "util/error.h"

namespace dgemma::cuda {

namespace {
std::atomic<uint64_t> g_launches{0};
std::atomic<uint64_t> g_syncs{0};
std::atomic<uint64_t> g_sync_ns{0};
}  // namespace

void count_sync(uint64_t waited_ns) {
  g_syncs.fetch_add(1, std::memory_order_relaxed);
  g_sync_ns.fetch_add(waited_ns, std::memory_order_relaxed);
}
void profiler_start() { CUDA_CHECK(cudaProfilerStart()); }
void profiler_stop() { CUDA_CHECK(cudaProfilerStop()); }

void add_sync_wait(uint64_t waited_ns) { g_sync_ns.fetch_add(waited_ns, std::memory_order_relaxed); }
uint64_t syncs_so_far() { return g_syncs.load(std::memory_order_relaxed); }
uint64_t sync_wait_ns_so_far() { return g_sync_ns.load(std::memory_order_relaxed); }

void count_launch() { g_launches.fetch_add(1, std::memory_order_relaxed); }
uint64_t launches_so_far() { return g_launches.load(std::memory_order_relaxed); }

void fail_cuda(int code, const char* expr, const char* file, int line) {
  const auto err = static_cast<cudaError_t>(code);
  const ErrorKind kind = err == cudaErrorMemoryAllocation ? ErrorKind::kResourceExhausted : ErrorKind::kInternal;
  throw Error(kind, fmt::format("CUDA error {} ({}: {}) in {} at {}:{}", code, cudaGetErrorName(err),
                                cudaGetErrorString(err), expr, file, line));
}

void fail_cublas(int status, const char* expr, const char* file, int line) {
  const auto st = static_cast<cublasStatus_t>(status);
  const ErrorKind kind = st == CUBLAS_STATUS_ALLOC_FAILED ? ErrorKind::kResourceExhausted : ErrorKind::kInternal;
  throw Error(kind, fmt::format("cuBLAS error {} ({}: {}) in {} at {}:{}", status, cublasGetStatusName(st),
                                cublasGetStatusString(st), expr, file, line));
}

}  // namespace dgemma::cuda
