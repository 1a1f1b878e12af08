#pragma once
// The CUDA backend's composite ops (host orchestration of kernels and cuBLAS calls).
#include "backend/backend.h"
#include "backend/cuda/cuda_context.h"

namespace dgemma::cuda {

void attention(const Context& ctx, const AttentionArgs& a);  // cuda_attention.cpp
// The flash kernel over every item when set_flash_attention is on and the shape is supported; false
// (nothing launched): the caller runs the per-item path.
bool attention_batch(const Context& ctx, const AttentionBatchArgs& a);  // cuda_attention.cpp
void moe(const Context& ctx, const MoeArgs& a);              // cuda_moe.cpp

}  // namespace dgemma::cuda

namespace dgemma::cuda {

void sampler(const Context& ctx, const SamplerArgs& a);      // cuda_backend.cpp
void sampler_batch(const Context& ctx, std::span<const SamplerArgs> canvases);  // cuda_backend.cpp
std::unique_ptr<Backend> create_backend(int device_index);   // cuda_backend.cpp
// The device and stream of a CUDA backend (throws for another backend): the NCCL collective's.
const Context& context_of(Backend& backend);                 // cuda_backend.cpp

}  // namespace dgemma::cuda
