// Entry points of the CUDA backend: the device checks, the kernel family resolved against the device,
// and the start-up line naming the kernels chosen.
#include "backend/backend.h"
#include "backend/cuda/core/device_info.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/device_memory.h"
#include "util/error.h"
#include "util/log.h"

namespace dgemma {

bool cuda_available() { return !cuda::query_devices().empty(); }
int cuda_device_count() { return static_cast<int>(cuda::query_devices().size()); }

std::optional<uint64_t> cuda_device_memory() {
  const std::vector<cuda::DeviceInfo> devices = cuda::query_devices();
  if (devices.empty()) return std::nullopt;
  return static_cast<uint64_t>(devices.front().total_memory);
}

std::unique_ptr<Backend> make_cuda_backend(int device_index, const CudaOptions& options) {
  const std::vector<cuda::DeviceInfo> devices = cuda::query_devices();
  if (devices.empty()) fail(ErrorKind::kUnsupported, "no CUDA GPU is visible to this process; use --device cpu");
  if (device_index < 0 || device_index >= static_cast<int>(devices.size()))
    fail(ErrorKind::kInvalidArgument, "CUDA device {} does not exist ({} visible)", device_index, devices.size());
  const cuda::DeviceInfo& d = devices[static_cast<size_t>(device_index)];
  if (d.major < 8)
    fail(ErrorKind::kUnsupported, "CUDA device {} ({}) has compute capability {}.{}; dgemma needs 8.0 or newer (bf16)",
         device_index, d.name, d.major, d.minor);
  const CudaOptions resolved = resolve_cuda_options(options, d.major, d.minor, d.name);
  DG_LOG_INFO("cuda", "cuda:{} ({}, sm_{}{}): {}", device_index, d.name, d.major, d.minor, describe_cuda_kernels(resolved));
  return cuda::create_backend(device_index, resolved);
}

}  // namespace dgemma
