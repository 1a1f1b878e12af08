#pragma once
// Fault injection into tensor parallelism, for the test server's `--load-format tp-fault:SPEC`: the real
// engine over the real CPU simulation of `-tp N` (dummy weights), whose collective group kills one rank
// at a chosen collective call. What follows is the product's own handling of a dead rank
// (TensorParallelModel::run, DiffusionEngine, serve), which the end-to-end tests assert.
//
// SPEC is comma-separated key=value pairs:
//   ranks=N      the tensor-parallel size (2, 4 or 8)
//   rank=R       the rank that dies
//   after=K      it dies at its K-th collective call (1-based; every call before it runs normally)
//   mode=M       throw: the call throws (a rank that crashed);
//                hang: the call never returns (a rank stuck): the others time out in the collective
//   timeout=S    the collective's timeout in seconds (default 2)
//   return=S     TensorParallelModel's wait for the other ranks after a failure (default 2)
#include <memory>
#include <string>

#include "backend/collective.h"
#include "engine/engine_config.h"

namespace dgemma {

struct TpFaultSpec {
  int ranks = 2;
  int rank = 1;
  int after = 1;
  bool hang = false;
  double timeout_seconds = 2;
  double return_seconds = 2;
};

// Throws Error(kInvalidArgument) naming what is wrong.
TpFaultSpec parse_tp_fault_spec(const std::string& spec);

// `inner` with spec.rank's spec.after-th collective call failing as spec.mode says.
std::unique_ptr<CollectiveGroup> make_faulty_group(std::unique_ptr<CollectiveGroup> inner,
                                                   const TpFaultSpec& spec);

// The engine `dgemma serve --device cpu -tp N --load-format dummy` builds, with the faulty group.
std::unique_ptr<EngineInterface> create_tp_fault_engine(const EngineConfig& config, const TpFaultSpec& spec);

}  // namespace dgemma
