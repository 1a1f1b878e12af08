#pragma once
// Row-wise RMSNorm, plain and the router's (host launchers; kernels in layer/norm.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// out[r, :] = bf16(x * (mean(x^2) + eps)^-0.5 [* w]) over rows of n; out may alias x; w may be null.
void launch_rmsnorm(const uint16_t* x, const uint16_t* w, uint16_t* out, int64_t rows, int64_t n, float eps,
                    Stream stream);
// The router's input (MoE): z = bf16(bf16(bf16(rmsnorm0(x)) * scale) * root), rows of n.
void launch_router_norm(const uint16_t* x, const uint16_t* scale, float root, uint16_t* out, int64_t rows,
                        int64_t n, float eps, Stream stream);

}  // namespace dgemma::cuda
