#pragma once
// The CUDA backend's MoE block (moe/moe.cpp): routing, the grouped expert GEMMs of the weights' format
// and the combine.
#include "backend/backend.h"
#include "backend/cuda/core/context.h"

namespace dgemma::cuda {

void moe(const Context& ctx, const MoeArgs& a);

}  // namespace dgemma::cuda
