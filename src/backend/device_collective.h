#pragma once
// The one-device collective: N CUDA backends of the same GPU as the N ranks of one tensor-parallel
// model, one host thread each (backend/collective.h). NCCL refuses two ranks on one device; this is how
// one GPU runs, and checks, the sharded CUDA model. Each operation meets the other ranks' threads to
// learn their buffers (backend/rendezvous.h: a timeout and abort, no hang), then orders the ranks'
// streams on the device (a one-thread kernel per rank that waits for the others' arrival counters,
// parallel/shard_kernels.cuh) and reads the others' buffers directly (they share the device's
// memory): gathers are device copies, the sums one kernel adding the ranks' values in rank order (the
// thread collective's order, so the results equal it bit for bit). Nothing waits on the host but the
// meetings. Because the streams meet on the device, each rank can record its share of a step into a
// CUDA graph of its own (Collective::capture), as with NCCL: the buffers learnt while recording are the
// ones every replay reads, and the replays meet on the device alone.
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/collective.h"

namespace dgemma {

// backends: CUDA backends (make_cuda_backend) of one device, rank r = backends[r], at most 8.
std::unique_ptr<CollectiveGroup> make_device_group(const std::vector<Backend*>& backends,
                                                   double timeout_seconds = kDefaultCollectiveTimeoutSeconds);

}  // namespace dgemma
