#pragma once
// The one-device collective: N CUDA backends of the same GPU as the N ranks of one tensor-parallel
// model, one host thread each (backend/collective.h). NCCL refuses two ranks on one device; this is how
// one GPU runs, and checks, the sharded CUDA model. In each operation the ranks' host threads meet once
// (backend/rendezvous.h: a timeout and abort, no hang) to learn each other's tensor addresses; the
// ranks' streams are ordered on the device (backend/cuda/parallel/rank_sync.cuh: every rank arrives once
// its input is written, and again once it has read the others', each waiting for all), so nothing waits
// on the host but the meeting. Gathers are device copies, the sums one kernel adding the ranks' values in
// rank order (the thread collective's order, so the results equal it bit for bit). The operations can
// be recorded into a CUDA graph by every rank, each on its own thread at the same time (the addresses
// met are those the recordings replay with); the graphs replay with the device meetings inside. A
// device wait longer than the group's timeout gives up and the rank's next synchronisation throws;
// abort() also ends the device waits. The ranks' streams must run at the same time on the device (each
// waiting rank holds one block of one warp while the others' work runs).
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/collective.h"

namespace dgemma {

// backends: CUDA backends (make_cuda_backend) of one device, rank r = backends[r], at most 8.
std::unique_ptr<CollectiveGroup> make_device_group(const std::vector<Backend*>& backends,
                                                   double timeout_seconds = kDefaultCollectiveTimeoutSeconds);

}  // namespace dgemma
