#include "backend/cuda/core/stream.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/core/check.h"

namespace dgemma::cuda {

Occupancy::Occupancy(int device) : device_(device) {
  int sms = 0, optin = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  sm_count_ = std::max(sms, 1);
  smem_optin_ = static_cast<size_t>(std::max(optin, 0));
}

int Occupancy::resident_blocks(const void* kernel, int threads, size_t smem) {
  const auto key = std::make_tuple(kernel, threads, smem);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = known_.find(key); it != known_.end()) return it->second;
  int blocks = 0;
  if (smem <= smem_optin_ || smem <= 48 * 1024) {
    if (smem > 48 * 1024)
      CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
    blocks = std::max(blocks, 0);
  }
  known_.emplace(key, blocks);
  return blocks;
}

}  // namespace dgemma::cuda
