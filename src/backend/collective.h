#pragma once
// The collective operations tensor parallelism needs between the ranks of one model (docs/ARCHITECTURE.md
// "Tensor parallelism"). Every rank calls the same operations in the same order with tensors of the same
// shape on its own backend's device. Three implementations: ThreadCollective (one thread per rank of one
// process, host memory: the CPU simulation CI runs), the one-device collective (N CUDA backends of one GPU,
// backend/device_collective.h: how one GPU runs the sharded CUDA step) and NcclCollective
// (one GPU per rank, NCCL loaded at run time, backend/nccl.h).
//
// Only exact operations are used: a gather moves values unchanged, and the reductions are sums where at
// most one rank contributes a value other than -0 at each element, the others -0 (exact in any order), or
// integer counts. That is what makes a sharded model bit-identical to the unsharded one.
//
// Failures: a rank that waits longer than its group's timeout for the others throws (and aborts the
// group, so no rank waits on); CollectiveGroup::abort makes every rank waiting in, or entering, a
// collective throw instead of hanging.
//
// CUDA graphs: every rank records its share of a step, collectives included, at once on its thread
// (capture below); the ranks then replay together.
#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/tensor.h"

namespace dgemma {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;

  // Gather along the last dimension: in is [..., n] (rows = numel / n), out is [..., size * n] with rank
  // r's row i at out row i, columns [r * n, (r + 1) * n). Any scalar type (bytes are moved).
  virtual void all_gather_last(const Tensor& in, const Tensor& out) = 0;
  // In-place element-wise sum over the ranks. bf16 and f32: exact when every element has at most one
  // contribution other than -0 (the sharded embedding lookup and the expert-parallel MoE slots); i32:
  // exact (histogram counts).
  virtual void all_reduce_sum(const Tensor& t) = 0;
  // Blocks until every rank has arrived and its work so far is done (tests; the operations above
  // synchronise by themselves).
  virtual void barrier() = 0;
  // Records `body`, this rank's share of a step with its collectives, for replay (null where the
  // backend records none). Every rank records at once, on its own thread, the same operations in the
  // same order, and every rank replays at once. The tensors the collectives see while recording are the
  // ones every replay uses. The default is the backend's recording of its stream (Backend::capture);
  // NCCL's also watches each replay; the one-device collective records all ranks as one graph.
  virtual std::unique_ptr<StepGraph> capture(Backend& backend, const std::function<void()>& body) {
    return backend.capture(body);
  }
};

// The endpoints of one group of ranks.
class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;
  virtual int size() const = 0;
  virtual Collective& rank(int r) = 0;
  // A rank failed: every rank waiting in (or entering) a collective throws instead of hanging.
  // Thread-safe; callable from any thread (a watchdog's).
  virtual void abort() = 0;
  // After an abort, once no rank is inside a collective: the group is usable again.
  virtual void reset() = 0;
  // Why the group failed, when it knows of a failure no rank has thrown yet (NCCL: an asynchronous error
  // or a timed-out operation the watchdog aborted while the ranks' host threads were not inside a
  // collective); empty otherwise.
  virtual std::string failure() const { return {}; }
};

// The bf16 code of -0: the neutral element of an exact sum (-0 + x == x for every x, +0 and -0 included).
constexpr uint16_t kBf16NegZero = 0x8000;

// Seconds a rank waits for the others in one collective before the group gives up (groups take it at
// construction; 0: forever).
constexpr double kDefaultCollectiveTimeoutSeconds = 300;

}  // namespace dgemma
