#pragma once
// The NCCL implementation of the collective interface (backend/collective.h) for the ranks of one
// process on CUDA devices: libnccl is loaded at run time (dlopen of the library named, else of
// libnccl.so.2 or libnccl.so as the dynamic loader finds them — e.g. the one PyTorch bundles, put on
// LD_LIBRARY_PATH), so dgemma builds without NCCL's headers or a -dev package and runs where only the
// shared library exists. Each rank's collectives run
// on its CUDA backend's stream, ordered with its kernels.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/collective.h"

namespace dgemma {

// Whether libnccl can be loaded (`library`: a file name or path; empty: the standard names); false
// without CUDA in this build. `why` gets the reason when not.
bool nccl_available(std::string* why = nullptr, const std::string& library = "");

// One communicator per backend (ncclCommInitAll over their devices): rank r is backends[r], a CUDA
// backend (make_cuda_backend) on its own device. Throws Error(kUnsupported) when NCCL cannot be loaded.
// An operation not complete within timeout_seconds (<= 0: no limit), or an NCCL error, aborts the group
// (backend/collective_watchdog.h): every rank's later operation throws with the reason.
std::unique_ptr<CollectiveGroup> make_nccl_group(const std::vector<Backend*>& backends,
                                                 const std::string& library = "",
                                                 double timeout_seconds = kDefaultCollectiveTimeoutSeconds);

}  // namespace dgemma
