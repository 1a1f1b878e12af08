#pragma once
// The fused per-position sampler of one denoising step over one or several canvases (host launcher;
// kernels in sampler/sampler.cu). Every pass covers all canvases of a batch in one launch; the kernels read
// the per-canvas parameters (SamplerBatch) from device memory, so a step can send them up with its other
// inputs in one copy and a CUDA graph replays the launches with the next step's parameters.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/core/stream.h"
#include "backend/cuda/sampler/batch.h"

namespace dgemma::cuda {

// All canvases share V; 1 <= n <= kMaxSamplerBatch (else cudaErrorInvalidValue).
SamplerBatch make_sampler_batch(const SamplerLaunch* canvases, int n);

// Scratch a launch of this batch needs (device memory of at least this many bytes, 16-byte aligned).
size_t sampler_workspace_bytes(const SamplerBatch& b);
int sampler_splits(int64_t V);
// `b` (host) decides the grids and passes; the kernels read `dev`, a copy of b in device memory (a
// batch with the same canvas shapes, filters and top-N sizes: another step's keys, temperatures and
// buffers).
void launch_sampler(const SamplerBatch& b, const SamplerBatch* dev, void* workspace, Stream stream);

namespace sampler_detail {
// The sample filters' floors (sampler/filter.cu): for every canvas with a filter, per chunk of
// kFilterRows rows, a histogram of the bf16 logits into `hist` and each row's floor into row_floor.
// `b` decides what is launched; the kernels read the batch at `dev` (its copy in device memory).
void launch_filter_floors(const SamplerBatch& b, const SamplerBatch* dev, uint32_t* hist, float* row_floor,
                          Stream stream);
}  // namespace sampler_detail

}  // namespace dgemma::cuda
