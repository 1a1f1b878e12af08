// The attention prologue op on the CPU backend (the default composition every backend is checked
// against): each head's weighted RMSNorm, then NeoX RoPE on q and k, v's unit norm, and for K=V layers
// v taken from the raw k (before k_norm and RoPE). Against a scalar transcription of the layer's
// formulas (docs/MODEL.md): fp32 maths, bf16 after the norm and after every RoPE product and sum.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "util/bf16.h"

namespace dgemma {
namespace {

Tensor random_bf16(std::initializer_list<int64_t> dims, float std, float mean, std::mt19937_64& rng) {
  Tensor t = host_tensor(ScalarType::kBF16, dims);
  std::normal_distribution<float> d(mean, std);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<uint16_t>()[i] = f32_to_bf16(d(rng));
  return t;
}

Tensor copy_of(const Tensor& t) {
  Tensor c = host_tensor(t.type, {t.numel()});
  std::copy_n(t.ptr<uint16_t>(), t.numel(), c.ptr<uint16_t>());
  return c.reshape({t.dim(0), t.dim(1), t.dim(2)});
}

// One head row of D: bf16(x * (mean(x^2) + eps)^-0.5 [* w]).
std::vector<float> norm_row(const uint16_t* x, const uint16_t* w, int64_t D, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(bf16_to_f32(x[i])) * bf16_to_f32(x[i]);
  const float inv = std::pow(static_cast<float>(ss / static_cast<double>(D)) + eps, -0.5f);
  std::vector<float> y(static_cast<size_t>(D));
  for (int64_t i = 0; i < D; ++i) {
    float v = bf16_to_f32(x[i]) * inv;
    if (w != nullptr) v *= bf16_to_f32(w[i]);
    y[static_cast<size_t>(i)] = round_bf16(v);
  }
  return y;
}

// x * cos + rotate_half(x) * sin with bf16 cos / sin, products and sums.
std::vector<float> rope_row(const std::vector<float>& x, int32_t pos, const std::vector<float>& inv_freq) {
  const size_t half = x.size() / 2;
  std::vector<float> y(x.size());
  for (size_t j = 0; j < half; ++j) {
    const float f = inv_freq[j] * static_cast<float>(pos);
    const float c = round_bf16(std::cos(f)), s = round_bf16(std::sin(f));
    y[j] = round_bf16(round_bf16(x[j] * c) + round_bf16(-x[j + half] * s));
    y[j + half] = round_bf16(round_bf16(x[j + half] * c) + round_bf16(x[j] * s));
  }
  return y;
}

void expect_row(const Tensor& t, int64_t row, const std::vector<float>& want, const char* what) {
  const int64_t D = t.dim(2);
  for (int64_t i = 0; i < D; ++i)
    ASSERT_EQ(t.ptr<uint16_t>()[row * D + i], f32_to_bf16(want[static_cast<size_t>(i)]))
        << what << " row " << row << " element " << i;
}

class QkvPrologue : public ::testing::TestWithParam<bool> {};

TEST_P(QkvPrologue, MatchesTheLayerFormulas) {
  const bool k_eq_v = GetParam();
  const int64_t T = 5, Hq = 4, Hkv = 2, D = 16;
  const float eps = 1e-6f;
  std::mt19937_64 rng(k_eq_v ? 7 : 8);
  Tensor q = random_bf16({T, Hq, D}, 2.0f, 0.0f, rng), k = random_bf16({T, Hkv, D}, 1.0f, 0.0f, rng);
  Tensor v = random_bf16({T, Hkv, D}, 3.0f, 0.0f, rng);
  Tensor wq = random_bf16({D}, 0.3f, 1.0f, rng), wk = random_bf16({D}, 0.3f, 1.0f, rng);
  std::vector<int32_t> pos = {0, 3, 17, 250, 9000};
  std::vector<float> inv(static_cast<size_t>(D / 2));
  for (size_t j = 0; j < inv.size(); ++j) inv[j] = 1.0f / std::pow(10000.0f, static_cast<float>(2 * j) / D);

  auto backend = make_cpu_backend();
  QkvPrologueArgs a;
  a.q = copy_of(q);
  a.k = copy_of(k);
  a.v = k_eq_v ? host_tensor(ScalarType::kBF16, {T, Hkv, D}) : copy_of(v);
  a.k_eq_v = k_eq_v;
  a.q_norm = wq;
  a.k_norm = wk;
  a.positions = host_tensor(ScalarType::kI32, {T});
  std::copy(pos.begin(), pos.end(), a.positions.ptr<int32_t>());
  a.inv_freq = host_tensor(ScalarType::kF32, {D / 2});
  std::copy(inv.begin(), inv.end(), a.inv_freq.ptr<float>());
  a.eps = eps;
  backend->qkv_prologue(a);

  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t row = t * Hq + h;
      expect_row(a.q, row, rope_row(norm_row(q.ptr<uint16_t>() + row * D, wq.ptr<uint16_t>(), D, eps), pos[t], inv), "q");
    }
    for (int64_t h = 0; h < Hkv; ++h) {
      const int64_t row = t * Hkv + h;
      const uint16_t* raw_k = k.ptr<uint16_t>() + row * D;
      expect_row(a.k, row, rope_row(norm_row(raw_k, wk.ptr<uint16_t>(), D, eps), pos[t], inv), "k");
      // v: the unit norm, no RoPE; K=V layers take it from the raw k.
      expect_row(a.v, row, norm_row(k_eq_v ? raw_k : v.ptr<uint16_t>() + row * D, nullptr, D, eps), "v");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KEqV, QkvPrologue, ::testing::Bool());

}  // namespace
}  // namespace dgemma
