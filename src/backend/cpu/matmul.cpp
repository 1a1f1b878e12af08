// GEMMs on the CPU (bf16 or quantised weights, quant_reference.h): operands converted to fp32, fixed-order
// fp32 dot products (dot.h), output rounded to bf16 — what cuBLAS does with bf16 inputs and fp32
// accumulation, up to summation order.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/dot.h"
#include "backend/quant_reference.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/parallel.h"

namespace dgemma::cpu {
namespace {

void to_f32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

constexpr int64_t kRowTile = 16;  // weight rows converted and kept hot per task

}  // namespace

void gemm_nt_f32(const float* x, const float* w, float* out, int64_t T, int64_t N, int64_t K) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) out[t * N + n] = dot_f32(x + t * K, w + n * K, K);
}

namespace {

// out [T, N] of the fp32 activations xf [T, K] (bf16 values, or FP8-dynamic's dequantised codes with
// their per-token scales xs; empty: none).
void matmul_f32(const std::vector<float>& xf, const std::vector<float>& xs, const Weight& w,
                const Tensor& out, int64_t T, int64_t N, int64_t K) {
  const float* rs = quant_ref::row_scales(w, 0);
  const int64_t tiles = (N + kRowTile - 1) / kRowTile;
  uint16_t* o = out.ptr<uint16_t>();
  parallel_for(static_cast<size_t>(tiles), [&](size_t b, size_t e) {
    std::vector<float> wf(static_cast<size_t>(kRowTile * K));
    for (size_t ti = b; ti < e; ++ti) {
      const int64_t n0 = static_cast<int64_t>(ti) * kRowTile;
      const int64_t nn = std::min(kRowTile, N - n0);
      quant_ref::dequant_rows(w, 0, n0, nn, wf.data());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < nn; ++j) {
          float acc = dot_f32(xf.data() + t * K, wf.data() + j * K, K);
          if (!xs.empty()) acc *= xs[t];
          if (rs) acc *= rs[n0 + j];
          o[t * N + n0 + j] = f32_to_bf16(acc);
        }
    }
  });
}

}  // namespace

void matmul(const Tensor& x, const Weight& w, const Tensor& out) {
  DG_CHECK(x.type == ScalarType::kBF16 && out.type == ScalarType::kBF16 && w.data.ndim == 2);
  const int64_t T = x.dim(0), K = x.dim(-1), N = w.rows();
  DG_CHECK(w.cols() == K && out.numel() == T * N);
  if (T == 0 || N == 0) return;
  std::vector<float> xf(static_cast<size_t>(T * K));
  to_f32(x.ptr<uint16_t>(), xf.data(), xf.size());
  std::vector<float> xs;  // per-token activation scales (FP8-dynamic)
  if (w.act == ActQuant::kFp8Token) {
    xs.resize(static_cast<size_t>(T));
    quant_ref::quantize_fp8_per_token(xf.data(), T, K, xs.data());
  }
  matmul_f32(xf, xs, w, out, T, N, K);
}

// The codes decoded are the values quantize_fp8_per_token leaves in place: exactly matmul of their x.
void matmul_fp8(const Fp8Rows& x, const Weight& w, const Tensor& out) {
  DG_CHECK(out.type == ScalarType::kBF16 && w.data.ndim == 2);
  const int64_t T = x.codes.ndim > 0 ? x.codes.dim(0) : 0, K = w.cols(), N = w.rows();
  check_fp8_input(x, w, T, Device::kCpu, "matmul_fp8");
  DG_CHECK(out.numel() == T * N);
  if (T == 0 || N == 0) return;
  std::vector<float> xf(static_cast<size_t>(T * K));
  const uint8_t* q = x.codes.ptr<uint8_t>();
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = f8e4m3_to_f32(q[i]);
  const std::vector<float> xs(x.scales.ptr<float>(), x.scales.ptr<float>() + T);
  matmul_f32(xf, xs, w, out, T, N, K);
}

namespace {

// w [K, N] bf16 transposed into fp32 [N, K], so every output is a contiguous dot product.
std::vector<float> transpose_f32(const Tensor& w) {
  const int64_t K = w.dim(0), N = w.dim(-1);
  std::vector<float> wt(static_cast<size_t>(N * K));
  const uint16_t* wp = w.ptr<uint16_t>();
  parallel_for(static_cast<size_t>(N), [&](size_t b, size_t e) {
    for (size_t n = b; n < e; ++n)
      for (int64_t k = 0; k < K; ++k) wt[n * K + k] = bf16_to_f32(wp[k * N + static_cast<int64_t>(n)]);
  });
  return wt;
}

void check_kn(const Tensor& x, const Tensor& w) {
  DG_CHECK(x.type == ScalarType::kBF16 && w.type == ScalarType::kBF16 && w.ndim == 2 && w.dim(0) == x.dim(-1));
}

}  // namespace

void matmul_kn(const Tensor& x, const Tensor& w, const Tensor& out) {
  check_kn(x, w);
  DG_CHECK(out.type == ScalarType::kBF16);
  const int64_t T = x.dim(0), K = x.dim(-1), N = w.dim(-1);
  DG_CHECK(out.numel() == T * N);
  if (T == 0 || N == 0) return;
  // K (the vocabulary) in kVocabBlocks blocks summed in block order: what a vocabulary-sharded
  // model computes with matmul_kn_blocks + sum_blocks.
  const int64_t B = K % kVocabBlocks == 0 ? kVocabBlocks : 1, Kb = K / B;
  const std::vector<float> wt = transpose_f32(w);
  uint16_t* o = out.ptr<uint16_t>();
  parallel_for(static_cast<size_t>(T), [&](size_t b, size_t e) {
    std::vector<float> xf(static_cast<size_t>(K));
    for (size_t t = b; t < e; ++t) {
      to_f32(x.ptr<uint16_t>() + t * K, xf.data(), static_cast<size_t>(K));
      for (int64_t n = 0; n < N; ++n) {
        float acc = 0.f;
        for (int64_t blk = 0; blk < B; ++blk) acc += dot_f32(xf.data() + blk * Kb, wt.data() + n * K + blk * Kb, Kb);
        o[t * N + n] = f32_to_bf16(acc);
      }
    }
  });
}

void matmul_kn_blocks(const Tensor& x, const Tensor& w, int blocks, const Tensor& out) {
  check_kn(x, w);
  const int64_t T = x.dim(0), K = x.dim(-1), N = w.dim(-1), B = blocks;
  DG_CHECK(B >= 1 && K % B == 0 && out.type == ScalarType::kF32 && out.numel() == T * N * B);
  if (T == 0 || N == 0) return;
  const int64_t Kb = K / B;
  const std::vector<float> wt = transpose_f32(w);
  float* o = out.ptr<float>();
  parallel_for(static_cast<size_t>(T), [&](size_t b, size_t e) {
    std::vector<float> xf(static_cast<size_t>(K));
    for (size_t t = b; t < e; ++t) {
      to_f32(x.ptr<uint16_t>() + t * K, xf.data(), static_cast<size_t>(K));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t blk = 0; blk < B; ++blk)
          o[(blk * T + t) * N + n] = dot_f32(xf.data() + blk * Kb, wt.data() + n * K + blk * Kb, Kb);
    }
  });
}

void sum_blocks(const Tensor& partials, const Tensor& out) {
  DG_CHECK(partials.type == ScalarType::kF32 && out.type == ScalarType::kBF16 && partials.ndim >= 1);
  const int64_t B = partials.dim(0), M = out.numel();
  DG_CHECK(partials.numel() == M * B);
  const float* p = partials.ptr<float>();
  uint16_t* o = out.ptr<uint16_t>();
  for (int64_t m = 0; m < M; ++m) {
    float acc = 0.f;
    for (int64_t blk = 0; blk < B; ++blk) acc += p[blk * M + m];
    o[m] = f32_to_bf16(acc);
  }
}

}  // namespace dgemma::cpu
