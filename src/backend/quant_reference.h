#pragma once
// The reference maths of the quantised weight formats (weight.h), shared by the CPU backend and the
// CUDA backend's weight upload: exact dequantisation into fp32 and FP8-dynamic's per-token activation
// quantisation. The reference matmul is
//   out[t, n] = bf16( (sum_k x[t, k] * value(n, k) * block(n, k/16)) [* s_t] * row_scale[n] )
// i.e. the per-row scale (and the per-token activation scale) multiply the fp32 dot product once, as a
// GEMM epilogue does; value * block is exact in fp32 (at most 6 significant bits).
#include <cstdint>

#include "backend/weight.h"

namespace dgemma::quant_ref {

// Rows [row0, row0 + n) of expert `expert` (0 for 2-D weights) as fp32 value * block, row-major
// [n, K]; the row scale is not applied.
void dequant_rows(const Weight& w, int64_t expert, int64_t row0, int64_t n, float* dst);
// The fp32 row scales of expert `expert` (nullptr for bf16 weights: scale 1).
const float* row_scales(const Weight& w, int64_t expert);

// Dynamic per-token FP8: for each row t of x [T, K] (fp32 values of bf16 activations)
// s_t = max(amax_t / 448, kFp8MinScale), x[t, k] := float(e4m3(clamp(x / s_t, +-448))) in place.
constexpr float kFp8Max = 448.0f;
constexpr float kFp8MinScale = 1.0f / (448.0f * 512.0f);  // floor of s_t (an all-zero row)
void quantize_fp8_per_token(float* x, int64_t T, int64_t K, float* scales);
// The same quantisation as E4M3 codes (backend.h Fp8Rows): codes[t, k] = e4m3(clamp(x[t, k] / s_t, +-448)).
void quantize_fp8_codes(const float* x, int64_t T, int64_t K, uint8_t* codes, float* scales);

// Exact fp32 dequantisation of a whole weight (value * block * row_scale), [.., N, K] row-major.
void dequantize(const Weight& w, float* dst);

}  // namespace dgemma::quant_ref
