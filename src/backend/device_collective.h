#pragma once
// The one-device collective: N CUDA backends of the same GPU as the N ranks of one tensor-parallel
// model, one host thread each (backend/collective.h). NCCL refuses two ranks on one device; this is how
// one GPU runs, and checks, the sharded CUDA model. Each operation meets the other ranks' threads
// (backend/rendezvous.h: a timeout and abort, no hang), then orders the ranks' streams with events and
// reads the others' buffers directly (they share the device's memory): gathers are device copies, the
// sums one kernel adding the ranks' values in rank order (the thread collective's order, so the
// results equal it bit for bit). Nothing waits on the host but the meeting, and a stream only ever
// waits on work another rank has already queued. Recording (Collective::capture): the ranks' streams
// join one capture, so a step of all ranks becomes one CUDA graph whose edges are the collectives'
// event orderings; rank 0 launches it and every rank's stream waits for the launch.
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/collective.h"

namespace dgemma {

// backends: CUDA backends (make_cuda_backend) of one device, rank r = backends[r], at most 8.
std::unique_ptr<CollectiveGroup> make_device_group(const std::vector<Backend*>& backends,
                                                   double timeout_seconds = kDefaultCollectiveTimeoutSeconds);

}  // namespace dgemma
