#pragma once
// The CUDA backend (cuda_backend.cpp: every op of backend.h on one stream of one GPU, dispatching to
// the ops of attention/, moe/, quant/, sampler/ and layer/).
#include <memory>

#include "backend/backend.h"
#include "backend/cuda/core/context.h"

namespace dgemma::cuda {

// The backend of a device with resolved options (the family kHopper or kPortable, checked against the
// device by make_cuda_backend).
std::unique_ptr<Backend> create_backend(int device_index, const CudaOptions& resolved);
// The device and stream of a CUDA backend (throws for another backend): the NCCL collective's, the GPU
// checks' direct kernel launches.
const Context& context_of(Backend& backend);

}  // namespace dgemma::cuda
