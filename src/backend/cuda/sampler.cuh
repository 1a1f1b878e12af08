#pragma once
// The fused per-position sampler of one denoising step over one or several canvases (host launcher;
// kernels in sampler.cu). Every pass covers all canvases of a batch in one launch; the kernels read the
// per-canvas parameters (SamplerBatch) from device memory, so a step can send them up with its other
// inputs in one copy and a CUDA graph replays the launches with the next step's parameters.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/sample_filter.h"

namespace dgemma::cuda {

// One canvas.
struct SamplerLaunch {
  uint16_t* logits = nullptr;  // [C, V] bf16, overwritten with the bf16 probabilities when want_probs
  int64_t C = 0, V = 0;
  float softcap = 30.0f, temperature = 1.0f;
  uint64_t sample_key = 0;
  bool want_probs = true;
  bool want_sample = true;        // false: no Gumbel noise; sample = argmax (sample_gap = argmax gap)
  float* entropy = nullptr;       // [C]
  int32_t* argmax = nullptr;      // [C]
  int32_t* sample = nullptr;      // [C]
  float* argmax_logprob = nullptr;  // [C] or null
  float* argmax_gap = nullptr;      // [C] or null
  float* sample_gap = nullptr;      // [C] or null
  SampleFilter filter;              // the support of the sample (off: no extra pass)
  float* sample_floor = nullptr;    // [C] or null: each row's least allowed z
  int top_n = 0;                    // 0..kMaxTopN alternatives per row
  int32_t* top_ids = nullptr;       // [C, top_n]
  float* top_logprobs = nullptr;    // [C, top_n]
  // Set by the launcher: this canvas's first row and first top-N entry in the batch's workspace.
  int64_t row0 = 0, top0 = 0;
};
constexpr int kMaxTopN = 20;
// Canvases per launch; a larger batch is launched in groups of this many.
constexpr int kMaxSamplerBatch = 16;

// The canvases of one launch as its kernels read them (a plain struct: copied to device memory as it
// is). make_sampler_batch assigns each canvas its workspace rows (row0, top0).
struct SamplerBatch {
  SamplerLaunch c[kMaxSamplerBatch];
  int n = 0;
  int splits = 1;
  bool vector = true;  // slice_stats_kernel's 8-element rounds where the slice allows (set_sampler_vector_sweep)
};
// All canvases share V; 1 <= n <= kMaxSamplerBatch (else cudaErrorInvalidValue).
SamplerBatch make_sampler_batch(const SamplerLaunch* canvases, int n);

// Scratch a launch of this batch needs (device memory of at least this many bytes, 16-byte aligned).
size_t sampler_workspace_bytes(const SamplerBatch& b);
int sampler_splits(int64_t V);
// `b` (host) decides the grids and passes; the kernels read `dev`, a copy of b in device memory (a
// batch with the same canvas shapes, filters and top-N sizes: another step's keys, temperatures and
// buffers). z_table: read z from a per-canvas table of the bf16 values (tuning.h set_sampler_z_table).
void launch_sampler(const SamplerBatch& b, const SamplerBatch* dev, void* workspace, cudaStream_t stream, bool z_table);

}  // namespace dgemma::cuda
