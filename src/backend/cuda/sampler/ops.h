#pragma once
// The sampler and decide ops of the CUDA backend (backend.h SamplerArgs / DecideArgs; sampler/ops.cpp),
// over all canvases of a step: the kernels read each launch group's arguments from device memory, either
// `encoded` (written by encode_*_args into a step's input block, group g at encoded + g) or, with
// encoded null, a copy the op sends up first.
#include <cstddef>
#include <span>

#include "backend/backend.h"
#include "backend/cuda/core/context.h"
#include "backend/cuda/sampler/decide.cuh"
#include "backend/cuda/sampler/sampler.cuh"

namespace dgemma::cuda {

void sampler_batch(const Context& ctx, std::span<const SamplerArgs> canvases, const SamplerBatch* encoded);
size_t encoded_sampler_bytes(int canvases);
void encode_sampler_args(std::span<const SamplerArgs> canvases, void* host);

void decide_batch(const Context& ctx, std::span<const DecideArgs> canvases, const DecideBatch* encoded);
size_t encoded_decide_bytes(int canvases);
void encode_decide_args(std::span<const DecideArgs> canvases, void* host);

}  // namespace dgemma::cuda
