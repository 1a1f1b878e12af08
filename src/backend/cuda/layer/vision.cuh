#pragma once
// The vision tower's own ops on the GPU (host launchers; kernels in layer/vision.cu): 2-D RoPE of image
// patches and the pooler, each element as the CPU reference computes it (cpu/vision_ops.cpp).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// x[T, heads, D] rotated in place: channels [0, D/2) by positions[t, 0], [D/2, D) by positions[t, 1],
// each half one NeoX block with bf16 cos/sin of position * inv_freq[j] (j < D/4) (Backend::rope_2d).
void launch_rope_2d(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t T, int64_t heads,
                    int64_t D, Stream stream);

// One image of the pooler (Backend::vision_pool): the k x k averages of x's rows [row_first, + gh * gw)
// into out's rows [out_first, + (gh / k) (gw / k)), times scale, then (v - bias) * std_scale when bias is
// not null; rows of H bf16.
void launch_vision_pool(const uint16_t* x, int64_t row_first, int64_t grid_h, int64_t grid_w, int64_t k,
                        int64_t H, float scale, const uint16_t* bias, const uint16_t* std_scale,
                        uint16_t* out, int64_t out_first, Stream stream);

}  // namespace dgemma::cuda
