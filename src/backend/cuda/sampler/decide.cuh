#pragma once
// The accept / renoise / stop decision of one denoising step (backend.h DecideArgs), one block per
// canvas, all canvases of a batch in one launch (host launcher and kernel in sampler/decide.cu; the
// block's work in sampler/decide_kernel.cuh). The kernel reads the per-canvas arguments (DecideBatch,
// sampler/decide_batch.h) from device memory, so that a step can send them up with its other inputs
// and a CUDA graph replays the launch with the next step's arguments.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"
#include "backend/cuda/sampler/decide_batch.h"

namespace dgemma::cuda {

// 1 <= n <= kMaxDecideBatch (else cudaErrorInvalidValue).
DecideBatch make_decide_batch(const DecideLaunch* canvases, int n);
// `b` (host) gives the grid and shared memory; the kernel reads `dev`, a copy of b in device memory (or
// of a batch of the same canvas count and sizes).
void launch_decide(const DecideBatch& b, const DecideBatch* dev, Stream stream);

}  // namespace dgemma::cuda
