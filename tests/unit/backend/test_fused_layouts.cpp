// The op forms of the fused projections (model/fused_weights.h) on the CPU backend and in the Backend
// defaults: copy_columns, gelu_mul_halves against gelu_mul of the two halves, and the attention
// prologue reading the fused q | k | v output against the prologue on separate q, k, v tensors —
// bit-identical, since each is the same per-element maths on the same values.
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

std::vector<uint16_t> bits(const Tensor& t) { return {t.ptr<uint16_t>(), t.ptr<uint16_t>() + t.numel()}; }

TEST(FusedLayouts, CopyColumnsTakesEachRowsBlock) {
  std::mt19937_64 rng(3);
  const Tensor src = random_bf16({5, 24}, 1.0f, 0.0f, rng);
  auto be = make_cpu_backend();
  Tensor dst = host_tensor(ScalarType::kBF16, {5, 2, 4}), dflt = host_tensor(ScalarType::kBF16, {5, 2, 4});
  be->copy_columns(dst, src, 9);
  be->Backend::copy_columns(dflt, src, 9);  // the default (through the host)
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t j = 0; j < 8; ++j) ASSERT_EQ(dst.ptr<uint16_t>()[t * 8 + j], src.ptr<uint16_t>()[t * 24 + 9 + j]) << t << " " << j;
  EXPECT_EQ(bits(dflt), bits(dst));
  Tensor wide = host_tensor(ScalarType::kBF16, {5, 16});
  EXPECT_ANY_THROW(be->copy_columns(wide, src, 9)) << "past the row's end";
}

TEST(FusedLayouts, GeluMulHalvesIsGeluMulOfTheHalves) {
  std::mt19937_64 rng(4);
  auto be = make_cpu_backend();
  for (int64_t I : {int64_t{8}, int64_t{13}}) {
    const int64_t T = 6;
    const Tensor gu = random_bf16({T, 2 * I}, 3.0f, 0.0f, rng);
    Tensor g = host_tensor(ScalarType::kBF16, {T, I}), u = host_tensor(ScalarType::kBF16, {T, I});
    be->copy_columns(g, gu, 0);
    be->copy_columns(u, gu, I);
    Tensor want = host_tensor(ScalarType::kBF16, {T, I}), got = host_tensor(ScalarType::kBF16, {T, I});
    Tensor dflt = host_tensor(ScalarType::kBF16, {T, I});
    be->gelu_mul(g, u, want);
    be->gelu_mul_halves(gu, got, {});
    be->Backend::gelu_mul_halves(gu, dflt, {});
    EXPECT_EQ(bits(got), bits(want)) << "I=" << I;
    EXPECT_EQ(bits(dflt), bits(want)) << "I=" << I;
  }
}

class FusedQkvInput : public ::testing::TestWithParam<bool> {};

TEST_P(FusedQkvInput, EqualsTheSeparateTensors) {
  const bool k_eq_v = GetParam();
  const int64_t T = 5, Hq = 4, Hkv = 2, D = 16, nq = Hq * D, nk = Hkv * D, n = nq + (k_eq_v ? 1 : 2) * nk;
  std::mt19937_64 rng(k_eq_v ? 9 : 10);
  const Tensor qkv = random_bf16({T, n}, 2.0f, 0.0f, rng);
  const Tensor wq = random_bf16({D}, 0.3f, 1.0f, rng), wk = random_bf16({D}, 0.3f, 1.0f, rng);
  Tensor pos = host_tensor(ScalarType::kI32, {T});
  for (int64_t t = 0; t < T; ++t) pos.ptr<int32_t>()[t] = static_cast<int32_t>(t * 37 + 1);
  Tensor inv = host_tensor(ScalarType::kF32, {D / 2});
  for (int64_t j = 0; j < D / 2; ++j) inv.ptr<float>()[j] = 1.0f / std::pow(10000.0f, static_cast<float>(2 * j) / D);
  auto be = make_cpu_backend();
  auto args = [&] {
    QkvPrologueArgs a;
    a.q = host_tensor(ScalarType::kBF16, {T, Hq, D});
    a.k = host_tensor(ScalarType::kBF16, {T, Hkv, D});
    a.v = host_tensor(ScalarType::kBF16, {T, Hkv, D});
    a.k_eq_v = k_eq_v;
    a.q_norm = wq;
    a.k_norm = wk;
    a.positions = pos;
    a.inv_freq = inv;
    return a;
  };
  QkvPrologueArgs sep = args(), fused = args();
  be->copy_columns(sep.q, qkv, 0);
  be->copy_columns(sep.k, qkv, nq);
  if (!k_eq_v) be->copy_columns(sep.v, qkv, nq + nk);
  be->qkv_prologue(sep);
  const std::vector<uint16_t> input = bits(qkv);
  fused.qkv = qkv;
  be->qkv_prologue(fused);
  EXPECT_EQ(bits(qkv), input) << "the fused input is read, not written";
  EXPECT_EQ(bits(fused.q), bits(sep.q));
  EXPECT_EQ(bits(fused.k), bits(sep.k));
  EXPECT_EQ(bits(fused.v), bits(sep.v));
  QkvPrologueArgs wrong = args();
  wrong.qkv = host_tensor(ScalarType::kBF16, {T, n + D});
  EXPECT_ANY_THROW(be->qkv_prologue(wrong)) << "a fused input of the wrong width";
}

INSTANTIATE_TEST_SUITE_P(KEqV, FusedQkvInput, ::testing::Bool());

}  // namespace
}  // namespace dgemma
