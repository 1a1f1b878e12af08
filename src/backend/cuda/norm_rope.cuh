#pragma once
// Row-wise RMSNorm (plain, the router's, the residual junctions) and in-place NeoX RoPE (host launchers; kernels in norm_rope.cu).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "backend/cuda/stream.h"

namespace dgemma::cuda {

// out[r, :] = bf16(x * (mean(x^2) + eps)^-0.5 [* w]) over rows of n; out may alias x; w may be null.
void launch_rmsnorm(const uint16_t* x, const uint16_t* w, uint16_t* out, int64_t rows, int64_t n, float eps,
                    Stream stream);
// The router's input (MoE): z = bf16(bf16(bf16(rmsnorm0(x)) * scale) * root), rows of n.
void launch_router_norm(const uint16_t* x, const uint16_t* scale, float root, uint16_t* out, int64_t rows, int64_t n,
                        float eps, Stream stream);

// The layer's residual junctions (backend.h AttnResidualArgs / FfnResidualArgs), one block per row of n
// elements; n must be a multiple of 8 and every pointer 16-byte aligned (residual_fusable). Null
// optional outputs are not written.
bool residual_fusable(int64_t n, std::initializer_list<const void*> ptrs);
void launch_attn_residual(const uint16_t* x, const uint16_t* o, const uint16_t* post_norm, uint16_t* h1,
                          const uint16_t* norm_a, uint16_t* out_a, const uint16_t* norm_b, uint16_t* out_b,
                          uint16_t* o_normed, const uint16_t* router_scale, float router_root, uint16_t* router_out,
                          int64_t rows, int64_t n, float eps, Stream stream);
void launch_ffn_residual(const uint16_t* h1, const uint16_t* m1, const uint16_t* m2, const uint16_t* norm1,
                         const uint16_t* norm2, const uint16_t* norm_f, float scale, uint16_t* out, uint16_t* m1n,
                         uint16_t* m2n, uint16_t* f, const uint16_t* next_norm, uint16_t* next_out, int64_t rows,
                         int64_t n, float eps, Stream stream);
// x[T, heads, D] rotated in place with bf16 cos/sin of positions[t] * inv_freq[j] (j < D/2).
void launch_rope(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads, int64_t D,
                 Stream stream);

}  // namespace dgemma::cuda
