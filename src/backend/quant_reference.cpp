#include "backend/quant_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/bf16.h"
#include "util/error.h"

namespace dgemma::quant_ref {

void dequant_rows(const Weight& w, int64_t expert, int64_t row0, int64_t n, float* dst) {
  const int64_t N = w.rows(), K = w.cols();
  DG_CHECK(expert >= 0 && expert < w.experts() && row0 >= 0 && row0 + n <= N);
  const int64_t first = expert * N + row0;
  switch (w.format) {
    case WeightFormat::kBF16: {
      DG_CHECK(w.data.type == ScalarType::kBF16);
      const uint16_t* src = w.data.ptr<uint16_t>() + first * K;
      for (int64_t i = 0; i < n * K; ++i) dst[i] = bf16_to_f32(src[i]);
      return;
    }
    case WeightFormat::kFp8Channel: {
      DG_CHECK(w.data.type == ScalarType::kF8E4M3);
      const uint8_t* src = w.data.ptr<uint8_t>() + first * K;
      for (int64_t i = 0; i < n * K; ++i) dst[i] = f8e4m3_to_f32(src[i]);
      return;
    }
    case WeightFormat::kNvfp4: {
      DG_CHECK(w.data.type == ScalarType::kU8 && w.block.type == ScalarType::kF8E4M3 && K % kNvfp4Group == 0);
      const int64_t G = K / kNvfp4Group;
      for (int64_t r = 0; r < n; ++r) {
        const uint8_t* q = w.data.ptr<uint8_t>() + (first + r) * (K / 2);
        const uint8_t* b = w.block.ptr<uint8_t>() + (first + r) * G;
        float* o = dst + r * K;
        for (int64_t g = 0; g < G; ++g) {
          const float s = f8e4m3_to_f32(b[g]);
          for (int j = 0; j < kNvfp4Group / 2; ++j) {
            const uint8_t byte = q[g * (kNvfp4Group / 2) + j];
            o[g * kNvfp4Group + 2 * j] = e2m1_value(byte & 0xf) * s;       // element 2j: low nibble
            o[g * kNvfp4Group + 2 * j + 1] = e2m1_value(byte >> 4) * s;  // element 2j+1: high nibble
          }
        }
      }
      return;
    }
  }
}

const float* row_scales(const Weight& w, int64_t expert) {
  if (w.format == WeightFormat::kBF16) return nullptr;
  DG_CHECK(w.row_scale.type == ScalarType::kF32 && w.row_scale.numel() == w.experts() * w.rows());
  return w.row_scale.ptr<float>() + expert * w.rows();
}

namespace {

// s_t of a row of K values (std::max skips NaN: amax stays as it is).
float fp8_row_scale(const float* row, int64_t K) {
  float amax = 0;
  for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(row[k]));
  return std::max(amax / kFp8Max, kFp8MinScale);
}

uint8_t fp8_code(float v, float s) {
  return f32_to_f8e4m3(std::clamp(v / s, -kFp8Max, kFp8Max));
}

}  // namespace

void quantize_fp8_per_token(float* x, int64_t T, int64_t K, float* scales) {
  for (int64_t t = 0; t < T; ++t) {
    float* row = x + t * K;
    const float s = fp8_row_scale(row, K);
    scales[t] = s;
    for (int64_t k = 0; k < K; ++k) row[k] = f8e4m3_to_f32(fp8_code(row[k], s));
  }
}

void quantize_fp8_codes(const float* x, int64_t T, int64_t K, uint8_t* codes, float* scales) {
  for (int64_t t = 0; t < T; ++t) {
    const float* row = x + t * K;
    const float s = fp8_row_scale(row, K);
    scales[t] = s;
    for (int64_t k = 0; k < K; ++k) codes[t * K + k] = fp8_code(row[k], s);
  }
}

void dequantize(const Weight& w, float* dst) {
  const int64_t N = w.rows(), K = w.cols();
  for (int64_t e = 0; e < w.experts(); ++e) {
    float* d = dst + e * N * K;
    dequant_rows(w, e, 0, N, d);
    if (const float* rs = row_scales(w, e))
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) d[n * K + k] *= rs[n];
  }
}

}  // namespace dgemma::quant_ref
