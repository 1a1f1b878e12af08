#pragma once
// KV-cache writes (host launcher; kernel in kv_cache.cu). kv_shift is two strided copies, in the backend.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dgemma::cuda {

// cache[h, offset + j, :] = src[j, h, :] for j < n, h < Hkv; cache is [Hkv, cap, D].
void launch_kv_write(uint16_t* cache, int64_t Hkv, int64_t cap, int64_t D, int64_t offset, const uint16_t* src, int64_t n,
                     cudaStream_t stream);

}  // namespace dgemma::cuda
