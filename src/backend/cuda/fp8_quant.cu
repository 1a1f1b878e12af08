// The W8A8 activation quantisation's launch (the kernel: fp8_quant_kernel.cuh).
#include "backend/cuda/common.cuh"
#include "backend/cuda/fp8_gemm.h"
#include "backend/cuda/fp8_quant_kernel.cuh"

namespace dgemma::cuda {

void launch_quantize_fp8_rows(const uint16_t* x, int64_t T, int64_t K, uint8_t* q, float* scales, cudaStream_t stream) {
  if (T <= 0) return;
  const unsigned blocks = static_cast<unsigned>(ceil_div(T, int64_t{kFp8QuantWarps}));
  quantize_fp8_rows_kernel<<<blocks, 32 * kFp8QuantWarps, 0, stream>>>(reinterpret_cast<const uint4*>(x), T, K / 8,
                                                                       reinterpret_cast<uint32_t*>(q), scales);
  CUDA_CHECK_LAUNCH();
}

}  // namespace dgemma::cuda
