#pragma once
// Blocks of bytes between a step buffer and buffers named by their device addresses (Backend::
// gather_blocks / scatter_blocks: the step's canvases and self-conditioning inputs and outputs), one
// launch for all blocks (host launchers; kernels in core/block_copy.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// dst + i * bytes <- the block at table[i] (zeros where table[i] == 0 and zero_missing, else untouched).
void launch_gather_blocks(const uint64_t* table, int64_t n, int64_t bytes, void* dst, bool zero_missing,
                          Stream stream);
// the block at table[i] <- src + i * bytes (nothing where table[i] == 0).
void launch_scatter_blocks(const void* src, const uint64_t* table, int64_t n, int64_t bytes, Stream stream);

}  // namespace dgemma::cuda
