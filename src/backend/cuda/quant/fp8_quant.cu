// The W8A8 activation quantisation's launch (the kernel: quant/fp8_quant_kernel.cuh).
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/quant/fp8_gemm.h"
#include "backend/cuda/quant/fp8_quant_kernel.cuh"

namespace dgemma::cuda {

void launch_quantize_fp8_rows(const uint16_t* x, int64_t T, int64_t K, uint8_t* q, float* scales, Stream stream) {
  if (T <= 0) return;
  const int64_t words = K / 8;
  const int w = fp8_quant_row_warps(words);
  const unsigned blocks = static_cast<unsigned>(fp8_quant_blocks(T, w));
  const auto* xv = reinterpret_cast<const uint4*>(x);
  auto* qv = reinterpret_cast<uint32_t*>(q);
  if (w == 4)
    launch_kernel(stream, quantize_fp8_rows_kernel<4>, blocks, 32 * kFp8QuantWarps, 0, xv, T, words, qv,
                  scales);
  else if (w == 2)
    launch_kernel(stream, quantize_fp8_rows_kernel<2>, blocks, 32 * kFp8QuantWarps, 0, xv, T, words, qv,
                  scales);
  else
    launch_kernel(stream, quantize_fp8_rows_kernel<1>, blocks, 32 * kFp8QuantWarps, 0, xv, T, words, qv,
                  scales);
}

}  // namespace dgemma::cuda
