#pragma once
// The device-side meeting of the ranks of the one-device collective (rank_sync.cu): N ranks, N streams
// of one GPU. Each rank owns a counter that only grows; a rank arrives by adding one to its counter and
// waits, on its stream, until every rank's counter has reached its own. Everything a rank queued before
// its arrival is then done for every rank's work queued after the wait. The wait reads the counters when
// it runs, not when it is queued, so a CUDA graph that holds it replays correctly any number of times,
// mixed with eager steps, as long as every rank arrives the same number of times.
#include <cstdint>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// The group's state word (mapped pinned host memory, so the host sets it while kernels wait).
enum RankSyncState : unsigned {
  kRankSyncRunning = 0,
  kRankSyncTimedOut = 1,  // a rank waited longer than the group's timeout
  kRankSyncAborted = 2,   // the host aborted the group
};

struct RankSyncWords {
  unsigned* arrivals = nullptr;  // device memory: one counter per rank (zero at start)
  unsigned* state = nullptr;     // the device address of the mapped state word
};

// Rank `rank` of `ranks` arrives and waits for the others (one block of one warp). A wait that lasts
// longer than timeout_ns (0: no bound), or finds the state not running, gives up: it sets the state to
// timed out (if it was running) and error_word's kErrCollectiveTimeout or kErrCollectiveAborted bit
// (core/common.cuh), and the work after it runs on; the host throws at its next synchronisation.
void launch_rank_arrive(const RankSyncWords& w, int rank, int ranks, uint64_t timeout_ns,
                        unsigned* error_word, Stream stream);

}  // namespace dgemma::cuda
