#pragma once
// The MoE combine: each token's expert outputs summed in the routing's order (host launcher; kernel in
// moe/combine_kernel.cuh).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// out[t, :] = bf16 running sum of y[t * K + order[t, j], :] over j (rounded after every add); H a
// multiple of 8, y and out 16-byte aligned, K <= 64.
void launch_moe_combine(const uint16_t* y, const int32_t* order, int64_t T, int64_t K, int64_t H,
                        uint16_t* out, Stream stream);

}  // namespace dgemma::cuda
