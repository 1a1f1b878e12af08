// The one-device collective's arrive-and-wait kernel (rank_sync.cuh).
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/parallel/rank_sync.cuh"
#include "backend/cuda/parallel/shard_kernels.cuh"
#include "util/error.h"

namespace dgemma::cuda {
namespace {

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

constexpr unsigned kMaxSleepNs = 2048;

__global__ void rank_arrive_kernel(unsigned* arrivals, unsigned* state_word, int rank, int ranks,
                                   uint64_t timeout_ns, unsigned* error_word) {
  if (threadIdx.x != 0) return;
  volatile unsigned* counters = arrivals;
  volatile unsigned* state = state_word;
  __threadfence();  // this rank's writes before the arrival, then the arrival
  const unsigned mine = atomicAdd(&arrivals[rank], 1u) + 1u;
  const uint64_t start = global_ns();
  unsigned sleep_ns = 32;
  for (;;) {
    bool all = true;
    for (int r = 0; r < ranks && all; ++r) all = static_cast<int>(counters[r] - mine) >= 0;  // wraps safely
    if (all) break;
    const unsigned s = *state;
    if (s != kRankSyncRunning) {
      atomicOr(error_word, s == kRankSyncTimedOut ? kErrCollectiveTimeout : kErrCollectiveAborted);
      break;
    }
    if (timeout_ns > 0 && global_ns() - start > timeout_ns) {
      *state = kRankSyncTimedOut;
      atomicOr(error_word, kErrCollectiveTimeout);
      break;
    }
    __nanosleep(sleep_ns);
    if (sleep_ns < kMaxSleepNs) sleep_ns *= 2;
  }
  __threadfence();  // the others' writes before their arrivals, then this rank's reads
}

}  // namespace

void launch_rank_arrive(const RankSyncWords& w, int rank, int ranks, uint64_t timeout_ns,
                        unsigned* error_word, Stream stream) {
  DG_CHECK(w.arrivals != nullptr && w.state != nullptr && ranks >= 1 && ranks <= kMaxRanks && rank >= 0 &&
           rank < ranks);
  launch_kernel(stream, rank_arrive_kernel, 1, 32, 0, w.arrivals, w.state, rank, ranks, timeout_ns,
                error_word);
}

}  // namespace dgemma::cuda
