#include <cuda_runtime.h>

#include <atomic>

#include "backend/cuda/device_info.cuh"

namespace dgemma::cuda {

std::vector<DeviceInfo> query_devices() {
  std::vector<DeviceInfo> out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return out;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.major = p.major;
    d.minor = p.minor;
    d.multiprocessors = p.multiProcessorCount;
    d.total_memory = p.totalGlobalMem;
    d.l2_bytes = static_cast<size_t>(p.l2CacheSize);
    d.shared_per_block_optin = p.sharedMemPerBlockOptin;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) d.free_memory = free_b;
    out.push_back(d);
  }
  return out;
}

bool current_device_has_wgmma() {
  constexpr int kCached = 64;
  static std::atomic<int> known[kCached];  // 0 unknown, 1 no, 2 yes
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  const bool cached = dev >= 0 && dev < kCached;
  if (cached && known[dev].load() != 0) return known[dev].load() == 2;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
  if (cached) known[dev] = major == 9 ? 2 : 1;
  return major == 9;
}

}  // namespace dgemma::cuda
