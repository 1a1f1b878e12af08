#pragma once
// The CUDA backend's attention ops (attention/attention.cpp): the per-item path (cuBLAS GEMMs and the
// softmax kernels of attention/per_item.cuh) and the one-launch flash kernels (attention/flash.cuh).
#include "backend/backend.h"
#include "backend/cuda/core/context.h"

namespace dgemma::cuda {

void attention(const Context& ctx, const AttentionArgs& a);
// The flash kernel over every item where the options and the shape allow it; false (nothing
// launched): the caller runs the per-item path.
bool attention_batch(const Context& ctx, const AttentionBatchArgs& a);

}  // namespace dgemma::cuda
