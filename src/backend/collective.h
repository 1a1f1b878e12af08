#pragma once
// The collective operations tensor parallelism needs between the ranks of one model (docs/ARCHITECTURE.md
// "Tensor parallelism"). Every rank calls the same operations in the same order with tensors of the same
// shape on its own backend's device. Two implementations: ThreadCollective (one thread per rank of one
// process, host memory: the CPU simulation CI runs) and NcclCollective (CUDA devices, NCCL loaded at run
// time, backend/cuda/nccl_collective.h).
//
// Only exact operations are used: a gather moves values unchanged, and the one reduction (a sum where at
// most one rank contributes a value other than -0 at each element, the others -0) is exact in any order.
// That is what makes a sharded model bit-identical to the unsharded one.
#include <memory>
#include <string>

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
  // In-place element-wise sum over the ranks (bf16 or f32). Exact when every element has at most one
  // contribution other than -0 (the sharded embedding lookup and the expert-parallel MoE slots).
  virtual void all_reduce_sum(const Tensor& t) = 0;
  // Blocks until every rank has arrived (tests; the operations above synchronise by themselves).
  virtual void barrier() = 0;
};

// The endpoints of one group of ranks.
class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;
  virtual int size() const = 0;
  virtual Collective& rank(int r) = 0;
  // A rank failed: every rank waiting in (or entering) a collective throws instead of hanging.
  virtual void abort() = 0;
  // After an abort, once no rank is inside a collective: the group is usable again.
  virtual void reset() = 0;
};

// The bf16 code of -0: the neutral element of an exact sum (-0 + x == x for every x, +0 and -0 included).
constexpr uint16_t kBf16NegZero = 0x8000;

}  // namespace dgemma
