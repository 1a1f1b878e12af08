#pragma once
// CUDA device discovery. Safe to call on machines without a GPU (returns count 0).
#include <string>
#include <vector>

namespace dgemma::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;
  int multiprocessors = 0;
  size_t total_memory = 0;
  size_t free_memory = 0;
  size_t l2_bytes = 0;
  size_t shared_per_block_optin = 0;
};

// Devices visible to this process; empty when there is no driver or no GPU.
std::vector<DeviceInfo> query_devices();

}  // namespace dgemma::cuda
