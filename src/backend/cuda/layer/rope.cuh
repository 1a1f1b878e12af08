#pragma once
// In-place NeoX RoPE (host launcher; kernel in layer/rope.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// x[T, heads, D] rotated in place with bf16 cos/sin of positions[t] * inv_freq[j] (j < D/2).
void launch_rope(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads,
                 int64_t D, Stream stream);

}  // namespace dgemma::cuda
