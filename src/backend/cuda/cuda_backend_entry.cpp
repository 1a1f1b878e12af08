// Entry points of the CUDA backend.
#include "backend/backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device_info.cuh"
#include "backend/device_memory.h"
#include "util/error.h"

namespace dgemma {

bool cuda_available() { return !cuda::query_devices().empty(); }

std::optional<uint64_t> cuda_device_memory() {
  const std::vector<cuda::DeviceInfo> devices = cuda::query_devices();
  if (devices.empty()) return std::nullopt;
  return static_cast<uint64_t>(devices.front().total_memory);
}

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  const std::vector<cuda::DeviceInfo> devices = cuda::query_devices();
  if (devices.empty()) fail(ErrorKind::kUnsupported, "no CUDA GPU is visible to this process; use --device cpu");
  if (device_index < 0 || device_index >= static_cast<int>(devices.size()))
    fail(ErrorKind::kInvalidArgument, "CUDA device {} does not exist ({} visible)", device_index, devices.size());
  const cuda::DeviceInfo& d = devices[static_cast<size_t>(device_index)];
  if (d.major < 8)
    fail(ErrorKind::kUnsupported, "CUDA device {} ({}) has compute capability {}.{}; dgemma needs 8.0 or newer (bf16)",
         device_index, d.name, d.major, d.minor);
  return cuda::create_backend(device_index);
}

}  // namespace dgemma
