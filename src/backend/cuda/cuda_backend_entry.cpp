// Entry points of the CUDA backend.
#include "backend/backend.h"
#include "backend/cuda/device_info.cuh"
#include "util/error.h"

namespace dgemma {

bool cuda_available() { return !cuda::query_devices().empty(); }

}  // namespace dgemma

namespace dgemma {

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  if (!cuda_available()) fail(ErrorKind::kUnsupported, "no CUDA GPU is visible to this process; use --device cpu");
  fail(ErrorKind::kUnsupported, "CUDA device {}: the CUDA kernels are not built yet; use --device cpu", device_index);
}

}  // namespace dgemma
