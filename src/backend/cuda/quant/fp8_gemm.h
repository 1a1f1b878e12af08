#pragma once
// W8A8 dense FP8 linears, FP8-dynamic as the checkpoint prescribes (weight.h ActQuant::kFp8Token):
//   out[t, n] = bf16(s_t * row_scale[n] * sum_k q[t, k] * w[n, k])
// with q, s the per-token E4M3 activations and scales (quant/fp8_quant_kernel.cuh, bit-identical to
// quant_ref::quantize_fp8_per_token) and w the checkpoint's E4M3 weight [N, K], row-major as stored (no
// repack). The GEMM is cuBLASLt's FP8 tensor-core kernel with fp32 accumulation (no fast
// accumulation), both scale vectors applied by cuBLASLt in its epilogue (outer-vector scaling,
// cuBLAS >= 12.9). In cuBLAS's column-major view it is the "TN" case: A = W (op T, the N row scales),
// B = q (op N, the T token scales), D = out^T (N x T column-major = out row-major). Host C++.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// q [T, K] (E4M3 codes) and scales [T] (fp32) of bf16 x [T, K]: K a multiple of 8, x and q 16-byte
// aligned.
void launch_quantize_fp8_rows(const uint16_t* x, int64_t T, int64_t K, uint8_t* q, float* scales, Stream stream);

// The cuBLASLt side: a handle, its own workspace, and the heuristic's algorithm cached per (N, K,
// T bucket: T rounded up to a power of two, at least 16). One per backend (its stream); thread-safe.
class Fp8Gemm {
 public:
  explicit Fp8Gemm(Stream stream);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  // Whether cuBLASLt takes this weight shape: its alignment rule (K and N multiples of 16) and an
  // algorithm from the heuristic at T = 16, 256 and 4096 (the answers are cached for run()). Asked
  // once per weight at upload: a weight it refuses stays on the W8A16 kernel.
  bool supported(int64_t N, int64_t K);
  // out [T, N] bf16 of q [T, K], w [N, K] (E4M3) and the scales, on the stream. Throws if cuBLASLt
  // refuses a shape supported() accepted (after a second heuristic query for this exact T).
  void run(const uint8_t* q, const float* x_scale, const uint8_t* w, const float* row_scale, int64_t T, int64_t N,
           int64_t K, uint16_t* out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgemma::cuda
