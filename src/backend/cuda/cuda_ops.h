#pragma once
// The CUDA backend's composite ops (host orchestration of kernels and cuBLAS calls).
#include "backend/backend.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/sampler.cuh"

namespace dgemma::cuda {

void attention(const Context& ctx, const AttentionArgs& a);  // cuda_attention.cpp
// The flash kernel over every item where the options and the shape allow it; false (nothing
// launched): the caller runs the per-item path.
bool attention_batch(const Context& ctx, const AttentionBatchArgs& a);  // cuda_attention.cpp
void moe(const Context& ctx, const MoeArgs& a);              // cuda_moe.cpp

}  // namespace dgemma::cuda

namespace dgemma::cuda {

void sampler(const Context& ctx, const SamplerArgs& a);      // cuda_backend.cpp
// The batched sampler, the kernels reading group g of the canvases (kMaxSamplerBatch each) at encoded + g
// (device memory written by encode_sampler_args), or, with encoded null, from a copy the op sends up.
void sampler_batch(const Context& ctx, std::span<const SamplerArgs> canvases, const SamplerBatch* encoded);
size_t encoded_sampler_bytes(int canvases);
void encode_sampler_args(std::span<const SamplerArgs> canvases, void* host);
// The backend of a device with resolved options (the family kHopper or kPortable, checked against the
// device by make_cuda_backend).
std::unique_ptr<Backend> create_backend(int device_index, const CudaOptions& resolved);  // cuda_backend.cpp
// The device and stream of a CUDA backend (throws for another backend): the NCCL collective's.
const Context& context_of(Backend& backend);                 // cuda_backend.cpp

}  // namespace dgemma::cuda
