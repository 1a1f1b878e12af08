#pragma once
// Where a quantised weight goes on the GPU (CudaOptions::dense_quant and fp8_experts): the one rule,
// and the host-side forms that CudaBackend::upload_weight sends up for each place.
#include "backend/cuda_options.h"
#include "backend/tensor.h"
#include "backend/weight.h"

namespace dgemma::cuda {

enum class WeightPlacement {
  kW8A8,    // row-major E4M3 as in the checkpoint: cuBLASLt's FP8 GEMM (quant/fp8_gemm.h) or the W8A8
            // experts (quant/w8a8_experts.cuh)
  kKernel,  // repacked for the W4A16 / W8A16 kernels (quant/layout.h, quant/weight_only.cuh)
  kBf16,    // dequantised exactly, rounded to bf16 once, for the bf16 kernels
};

// Whether `host` (quantised) is a dense FP8 linear whose checkpoint prescribes per-token FP8
// activations and the options serve such linears W8A8: then cuBLASLt must take its shape.
bool wants_dense_w8a8(const Weight& host, const CudaOptions& options);
// The place of a quantised weight. Expert stacks: W8A8 for FP8-dynamic experts with
// Fp8Experts::kW8A8 where the W8A8 kernels take the shape, else the W4A16 / W8A16 kernels. Dense
// linears: W8A8 where wants_dense_w8a8 and cuBLASLt takes the shape (dense_w8a8_supported), else the
// kernels unless DenseQuant::kBf16. A weight off the kernels' shape rule (K % 64, rows % 8): bf16.
WeightPlacement weight_placement(const Weight& host, const CudaOptions& options, bool dense_w8a8_supported);

// The host weight repacked for the W4A16 / W8A16 kernels (quant/layout.h: the data's stage order, NVFP4
// block scales stage-major with no zero code), act kNone (bf16 activations).
Weight repacked_for_kernels(const Weight& host);
// The exact dequantisation (quant_reference.h: value * block * row scale) rounded to bf16 once, as a
// host tensor of the weight's dims ([E, N, K] or [N, K]).
Tensor dequantized_bf16(const Weight& host);

}  // namespace dgemma::cuda
