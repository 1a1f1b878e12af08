#pragma once
// Fixed-order fp32 dot product: 8 interleaved partial sums combined pairwise. The summation order
// depends only on the length, never on the batch size or the thread count, so a sequence gives
// bitwise the same results alone or batched with others.
#include <cstdint>

namespace dgemma::cpu {

inline float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[k + j] * b[k + j];
  float tail = 0;
  for (; k < n; ++k) tail += a[k] * b[k];
  return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
}

// out[T, N] = x[T, K] . w[N, K]^T with dot_f32 per element (fp32 operands).
void gemm_nt_f32(const float* x, const float* w, float* out, int64_t T, int64_t N, int64_t K);

}  // namespace dgemma::cpu
