#pragma once
// Paged KV-cache kernels (host launchers; kernels in core/kv_cache.cu). A layer's pool is
// [num_pages, Hkv, P, D] bf16; absolute position p lives in page table[p / P], row p % P.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// pages[table[(first + j) / P], h, (first + j) % P, :] = src[j, h, :] for j < n, h < Hkv.
void launch_kv_write_paged(uint16_t* pages, int64_t Hkv, int64_t P, int64_t D, const int32_t* table, int64_t first,
                           const uint16_t* src, int64_t n, Stream stream);

// dst[h, j, :] = pages[table[(first + j) / P], h, (first + j) % P, :] for j < L: the cached keys of one
// sequence as the contiguous [Hkv, L, D] operand of the attention GEMMs.
void launch_kv_gather(const uint16_t* pages, int64_t Hkv, int64_t P, int64_t D, const int32_t* table, int64_t first,
                      int64_t L, uint16_t* dst, Stream stream);

}  // namespace dgemma::cuda
