// bf16 GEMMs on the CPU: operands converted to fp32 in tiles, OpenBLAS sgemm, output rounded to bf16
// (what cuBLAS does with bf16 inputs and fp32 accumulation, up to summation order).
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/parallel.h"

namespace dgemma::cpu {
namespace {

void to_f32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

}  // namespace

void matmul(const Tensor& x, const Tensor& w, const Tensor& out) {
  DG_CHECK(x.type == ScalarType::kBF16 && w.type == ScalarType::kBF16 && out.type == ScalarType::kBF16);
  const int64_t T = x.dim(0), K = x.dim(-1), N = w.dim(0);
  DG_CHECK(w.dim(-1) == K && out.numel() == T * N);
  if (T == 0 || N == 0) return;
  std::vector<float> xf(static_cast<size_t>(T * K));
  to_f32(x.ptr<uint16_t>(), xf.data(), xf.size());
  // Parallel over column tiles of the output: each task converts its slice of W and runs sgemm
  // single-threaded, so results are independent of the thread count.
  const int64_t tile = 256;
  const int64_t tiles = (N + tile - 1) / tile;
  parallel_for(static_cast<size_t>(tiles), [&](size_t b, size_t e) {
    std::vector<float> wf(static_cast<size_t>(tile * K));
    std::vector<float> of(static_cast<size_t>(T * tile));
    for (size_t ti = b; ti < e; ++ti) {
      const int64_t n0 = static_cast<int64_t>(ti) * tile;
      const int64_t nn = std::min(tile, N - n0);
      to_f32(w.ptr<uint16_t>() + n0 * K, wf.data(), static_cast<size_t>(nn * K));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(nn),
                  static_cast<int>(K), 1.0f, xf.data(), static_cast<int>(K), wf.data(), static_cast<int>(K), 0.0f,
                  of.data(), static_cast<int>(nn));
      uint16_t* o = out.ptr<uint16_t>();
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < nn; ++j) o[t * N + n0 + j] = f32_to_bf16(of[static_cast<size_t>(t * nn + j)]);
    }
  });
}

void matmul_kn(const Tensor& x, const Tensor& w, const Tensor& out) {
  DG_CHECK(x.type == ScalarType::kBF16 && w.type == ScalarType::kBF16 && out.type == ScalarType::kBF16);
  const int64_t T = x.dim(0), K = x.dim(-1), N = w.dim(-1);
  DG_CHECK(w.dim(0) == K && out.numel() == T * N);
  if (T == 0 || N == 0) return;
  std::vector<float> xf(static_cast<size_t>(T * K));
  to_f32(x.ptr<uint16_t>(), xf.data(), xf.size());
  std::vector<float> wf(static_cast<size_t>(K * N));
  to_f32(w.ptr<uint16_t>(), wf.data(), wf.size());
  std::vector<float> of(static_cast<size_t>(T * N));
  // Parallel over output rows.
  parallel_for(static_cast<size_t>(T), [&](size_t b, size_t e) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(e - b), static_cast<int>(N),
                static_cast<int>(K), 1.0f, xf.data() + b * K, static_cast<int>(K), wf.data(), static_cast<int>(N),
                0.0f, of.data() + b * N, static_cast<int>(N));
  });
  uint16_t* o = out.ptr<uint16_t>();
  for (size_t i = 0; i < of.size(); ++i) o[i] = f32_to_bf16(of[i]);
}

}  // namespace dgemma::cpu
