#pragma once
// Row-wise RMSNorm and in-place NeoX RoPE (host launchers; kernels in norm_rope.cu).
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dgemma::cuda {

// out[r, :] = bf16(x * (mean(x^2) + eps)^-0.5 [* w]) over rows of n; out may alias x; w may be null.
void launch_rmsnorm(const uint16_t* x, const uint16_t* w, uint16_t* out, int64_t rows, int64_t n, float eps,
                    cudaStream_t stream);
// The router's input (MoE): z = bf16(bf16(bf16(rmsnorm0(x)) * scale) * root), rows of n.
void launch_router_norm(const uint16_t* x, const uint16_t* scale, float root, uint16_t* out, int64_t rows, int64_t n,
                        float eps, cudaStream_t stream);
// x[T, heads, D] rotated in place with bf16 cos/sin of positions[t] * inv_freq[j] (j < D/2).
void launch_rope(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads, int64_t D,
                 cudaStream_t stream);

}  // namespace dgemma::cuda
