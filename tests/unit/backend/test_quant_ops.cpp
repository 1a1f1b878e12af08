// The CPU reference of the quantised weight formats (backend/quant_reference.h): the E4M3 encoder against a
// brute-force nearest search, the quantised matmul against a double-precision evaluation of the
// format's definition, FP8-dynamic per-token activations, and the MoE op on quantised experts equal,
// bit for bit, to the bf16 MoE on their dequantised weights. FP8 rows given upstream (backend.h
// Fp8Rows): quantize_fp8_rows, matmul_fp8 and the MoE's expert_in_fp8 equal the ops quantising
// themselves, bit for bit, and rows given for a weight that does not run W8A8 are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/quant_reference.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma {
namespace {

// Nearest finite E4M3 value by exhaustive search, ties to the even code.
uint8_t brute_e4m3(float x) {
  int best = 0;
  double bd = INFINITY;
  for (int c = 0; c < 0x7f; ++c) {
    const double d = std::fabs(std::fabs(static_cast<double>(x)) - f8e4m3_to_f32(static_cast<uint8_t>(c)));
    if (d < bd || (d == bd && c % 2 == 0)) {
      bd = d;
      best = c;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

TEST(QuantOps, E4m3EncoderIsNearestTiesToEvenSaturating) {
  std::mt19937 rng(1);
  std::vector<float> xs;
  for (int c = 0; c < 0x7f; ++c) {
    const float v = f8e4m3_to_f32(static_cast<uint8_t>(c));
    xs.push_back(v);
    xs.push_back(-v);
    if (c < 0x7e) xs.push_back((v + f8e4m3_to_f32(static_cast<uint8_t>(c + 1))) / 2);  // exact midpoints
  }
  std::uniform_real_distribution<float> u(-500.0f, 500.0f);
  for (int i = 0; i < 2000; ++i) xs.push_back(u(rng) * std::pow(2.0f, -static_cast<float>(i % 14)));
  for (float x : xs) {
    if (std::fabs(x) > 448.0f) continue;
    EXPECT_EQ(f32_to_f8e4m3(x), brute_e4m3(x)) << x;
  }
  EXPECT_EQ(f32_to_f8e4m3(1000.0f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-1000.0f), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(std::nanf("")), 0x7f);
  static const float kMag[8] = {0, .5f, 1, 1.5f, 2, 3, 4, 6};
  for (int n = 0; n < 16; ++n) EXPECT_EQ(e2m1_value(static_cast<uint8_t>(n)), (n & 8 ? -1.0f : 1.0f) * kMag[n & 7]);
}

struct Rand {
  std::mt19937 rng;
  explicit Rand(uint32_t seed) : rng(seed) {}
  float normal(float s) { return std::normal_distribution<float>(0.0f, s)(rng); }
  uint8_t byte() { return static_cast<uint8_t>(rng() & 0xff); }
  // A valid positive E4M3 block scale code in [2^-6, 2^3].
  uint8_t block_code() { return static_cast<uint8_t>((rng() % 80) + 8 * 1 + 0); }
  Tensor bf16(std::initializer_list<int64_t> dims, float s) {
    Tensor t = host_tensor(ScalarType::kBF16, dims);
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<uint16_t>()[i] = f32_to_bf16(normal(s));
    return t;
  }
};

// A random quantised weight [E?, N, K]; pow2 row scales when asked.
Weight random_weight(Rand& r, WeightFormat f, int64_t E, int64_t N, int64_t K, bool pow2) {
  Weight w;
  w.format = f;
  if (f == WeightFormat::kNvfp4) {
    w.data = E > 1 ? host_tensor(ScalarType::kU8, {E, N, K / 2}) : host_tensor(ScalarType::kU8, {N, K / 2});
    w.block = E > 1 ? host_tensor(ScalarType::kF8E4M3, {E, N, K / 16}) : host_tensor(ScalarType::kF8E4M3, {N, K / 16});
    for (int64_t i = 0; i < w.data.numel(); ++i) w.data.ptr<uint8_t>()[i] = r.byte();
    for (int64_t i = 0; i < w.block.numel(); ++i) w.block.ptr<uint8_t>()[i] = r.block_code();
  } else {
    w.data = E > 1 ? host_tensor(ScalarType::kF8E4M3, {E, N, K}) : host_tensor(ScalarType::kF8E4M3, {N, K});
    for (int64_t i = 0; i < w.data.numel(); ++i) {
      uint8_t b = r.byte();
      while ((b & 0x7f) == 0x7f) b = r.byte();  // no NaN codes
      w.data.ptr<uint8_t>()[i] = b;
    }
  }
  w.row_scale = host_tensor(ScalarType::kF32, {E * N});
  for (int64_t i = 0; i < E * N; ++i)
    w.row_scale.ptr<float>()[i] = pow2 ? std::ldexp(1.0f, -static_cast<int>(r.rng() % 6) - 6) : 0.002f * (1.0f + 0.5f * std::fabs(r.normal(1)));
  return w;
}

// Element (n, k) of expert e by the format's definition (decoded from the bytes here).
double definition(const Weight& w, int64_t e, int64_t n, int64_t k) {
  const int64_t N = w.rows(), K = w.cols(), row = e * N + n;
  const double rs = w.row_scale.ptr<float>()[row];
  if (w.format == WeightFormat::kFp8Channel) return f8e4m3_to_f32(w.data.ptr<uint8_t>()[row * K + k]) * rs;
  const uint8_t byte = w.data.ptr<uint8_t>()[row * (K / 2) + k / 2];
  const uint8_t nib = k % 2 == 0 ? (byte & 0xf) : (byte >> 4);
  static const double kMag[8] = {0, .5, 1, 1.5, 2, 3, 4, 6};
  const double v = (nib & 8 ? -1 : 1) * kMag[nib & 7];
  return v * f8e4m3_to_f32(w.block.ptr<uint8_t>()[row * (K / 16) + k / 16]) * rs;
}

// |got - want| within one bf16 rounding of the output plus fp32 summation noise.
void expect_bf16_close(float got, double want, double scale, const char* what) {
  EXPECT_LE(std::fabs(got - want), std::fabs(want) * (1.0 / 256) + scale * 1e-5) << what << ": " << got << " vs " << want;
}

TEST(QuantOps, MatmulMatchesTheFormatDefinition) {
  auto be = make_cpu_backend();
  for (WeightFormat f : {WeightFormat::kNvfp4, WeightFormat::kFp8Channel}) {
    for (bool act : {false, true}) {
      if (act && f == WeightFormat::kNvfp4) continue;
      Rand r(7 + static_cast<int>(f));
      const int64_t T = 5, N = 24, K = 96;
      Weight w = random_weight(r, f, 1, N, K, false);
      w.act = act ? ActQuant::kFp8Token : ActQuant::kNone;
      Tensor x = r.bf16({T, K}, 1.0f);
      Tensor out = host_tensor(ScalarType::kBF16, {T, N});
      be->matmul(x, w, out);
      for (int64_t t = 0; t < T; ++t) {
        // FP8-dynamic: s_t = amax / 448, x_q = e4m3(x / s_t) (the encoder is checked above).
        double amax = 0;
        for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(static_cast<double>(bf16_to_f32(x.ptr<uint16_t>()[t * K + k]))));
        const float s = static_cast<float>(amax) / 448.0f;
        for (int64_t n = 0; n < N; ++n) {
          double acc = 0, mag = 0;
          for (int64_t k = 0; k < K; ++k) {
            double xv = bf16_to_f32(x.ptr<uint16_t>()[t * K + k]);
            if (act) xv = f8e4m3_to_f32(f32_to_f8e4m3(static_cast<float>(xv) / s)) * s;
            acc += xv * definition(w, 0, n, k);
            mag += std::fabs(xv * definition(w, 0, n, k));
          }
          expect_bf16_close(bf16_to_f32(out.ptr<uint16_t>()[t * N + n]), acc, mag, act ? "fp8 act" : "weight only");
        }
      }
    }
  }
}

TEST(QuantOps, Fp8PerTokenActivationsOfAZeroRowStayZero) {
  std::vector<float> x(8, 0.0f);
  float s = 0;
  quant_ref::quantize_fp8_per_token(x.data(), 1, 8, &s);
  EXPECT_GT(s, 0.0f);
  for (float v : x) EXPECT_EQ(v, 0.0f);
}

// A small MoE block (top-2 of E experts) in weight format f, its output allocated; `pow2` as random_weight.
MoeArgs small_moe(Rand& r, WeightFormat f, int64_t T, int64_t H, int64_t I, int64_t E, bool pow2) {
  MoeArgs a;
  a.router_in = r.bf16({T, H}, 1.0f);
  a.expert_in = r.bf16({T, H}, 1.0f);
  a.router_scale = r.bf16({H}, 1.0f);
  a.router_proj = r.bf16({E, H}, 0.3f);
  a.per_expert_scale = r.bf16({E}, 1.0f);
  a.gate_up = random_weight(r, f, E, 2 * I, H, pow2);
  a.down = random_weight(r, f, E, H, I, pow2);
  a.top_k = 2;
  a.out = host_tensor(ScalarType::kBF16, {T, H});
  return a;
}

// MoE on quantised experts == MoE on their dequantised bf16 weights, bit for bit (pow2 row scales:
// the epilogue scale multiply is exact; value * block is exact in fp32), gate and up scales distinct.
TEST(QuantOps, MoeOnQuantisedExpertsEqualsBf16OnDequantised) {
  auto be = make_cpu_backend();
  for (WeightFormat f : {WeightFormat::kNvfp4, WeightFormat::kFp8Channel}) {
    Rand r(11);
    const int64_t T = 12, H = 64, I = 32, E = 4;
    MoeArgs q = small_moe(r, f, T, H, I, E, true);
    MoeArgs d = q;
    auto deq = [](const Weight& w) {
      std::vector<float> v(static_cast<size_t>(w.experts() * w.rows() * w.cols()));
      quant_ref::dequantize(w, v.data());
      Tensor t = host_tensor(ScalarType::kBF16, {w.experts(), w.rows(), w.cols()});
      for (size_t i = 0; i < v.size(); ++i) {
        EXPECT_EQ(round_bf16(v[i]), v[i]);
        t.ptr<uint16_t>()[i] = f32_to_bf16(v[i]);
      }
      return Weight(t);
    };
    d.gate_up = deq(q.gate_up);
    d.down = deq(q.down);
    d.out = host_tensor(ScalarType::kBF16, {T, H});
    be->moe(q);
    be->moe(d);
    for (int64_t i = 0; i < T * H; ++i) ASSERT_EQ(q.out.ptr<uint16_t>()[i], d.out.ptr<uint16_t>()[i]) << i;
  }
}

Fp8Rows host_fp8_rows(int64_t T, int64_t K) {
  return Fp8Rows{host_tensor(ScalarType::kU8, {T, K}), host_tensor(ScalarType::kF32, {T})};
}

TEST(QuantOps, Fp8RowsOpEqualsTheReferenceCodes) {
  auto be = make_cpu_backend();
  Rand r(21);
  const int64_t T = 4, K = 48;
  Tensor x = r.bf16({T, K}, 2.0f);
  for (int64_t k = 0; k < K; ++k) x.ptr<uint16_t>()[K + k] = 0;  // an all-zero row: the floor scale
  const Fp8Rows q = host_fp8_rows(T, K);
  be->quantize_fp8_rows(x, q);
  std::vector<float> xf(static_cast<size_t>(T * K)), s(static_cast<size_t>(T));
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = bf16_to_f32(x.ptr<uint16_t>()[i]);
  quant_ref::quantize_fp8_per_token(xf.data(), T, K, s.data());  // the values the codes decode to
  for (int64_t t = 0; t < T; ++t) EXPECT_EQ(q.scales.ptr<float>()[t], s[static_cast<size_t>(t)]) << t;
  EXPECT_EQ(q.scales.ptr<float>()[1], quant_ref::kFp8MinScale);
  for (size_t i = 0; i < xf.size(); ++i) ASSERT_EQ(f8e4m3_to_f32(q.codes.ptr<uint8_t>()[i]), xf[i]) << i;
}

TEST(QuantOps, MatmulFromFp8RowsEqualsMatmulExactly) {
  auto be = make_cpu_backend();
  Rand r(23);
  const int64_t T = 6, N = 40, K = 96;
  Weight w = random_weight(r, WeightFormat::kFp8Channel, 1, N, K, false);
  w.act = ActQuant::kFp8Token;
  ASSERT_TRUE(takes_fp8_rows(w));
  Tensor x = r.bf16({T, K}, 3.0f);
  Tensor want = host_tensor(ScalarType::kBF16, {T, N}), got = host_tensor(ScalarType::kBF16, {T, N});
  be->matmul(x, w, want);
  const Fp8Rows q = host_fp8_rows(T, K);
  be->quantize_fp8_rows(x, q);
  be->matmul_fp8(q, w, got);
  for (int64_t i = 0; i < T * N; ++i) ASSERT_EQ(got.ptr<uint16_t>()[i], want.ptr<uint16_t>()[i]) << i;
}

// The one rule (takes_fp8_rows): only an FP8 weight run W8A8 with K a multiple of kFp8RowsAlign takes
// rows; any other is refused rather than computed from the rows.
TEST(QuantOps, Fp8RowsForAWeightNotRunW8a8AreRefused) {
  auto be = make_cpu_backend();
  Rand r(25);
  const int64_t T = 3, N = 16, K = 64;
  Weight w8a16 = random_weight(r, WeightFormat::kFp8Channel, 1, N, K, false);  // act kNone
  Weight nvfp4 = random_weight(r, WeightFormat::kNvfp4, 1, N, K, false);
  Weight plain(r.bf16({N, K}, 1.0f));
  Weight odd = random_weight(r, WeightFormat::kFp8Channel, 1, N, 40, false);  // K % 16 != 0
  odd.act = ActQuant::kFp8Token;
  const Fp8Rows q = host_fp8_rows(T, K);
  Tensor out = host_tensor(ScalarType::kBF16, {T, N});
  for (const Weight* w : {&w8a16, &nvfp4, &plain, &odd}) {
    EXPECT_FALSE(takes_fp8_rows(*w)) << w->describe();
    EXPECT_THROW(be->matmul_fp8(q, *w, out), Error) << w->describe();
  }
  Weight ok = random_weight(r, WeightFormat::kFp8Channel, 1, N, K, false);
  ok.act = ActQuant::kFp8Token;
  EXPECT_THROW(be->matmul_fp8(host_fp8_rows(T, K - 16), ok, out), Error);  // rows of another width
}

// The experts' gate_up from expert_in's FP8 rows: bit for bit the MoE quantising each routed row.
TEST(QuantOps, MoeFromGivenFp8RowsEqualsMoeQuantisingItself) {
  auto be = make_cpu_backend();
  Rand r(27);
  const int64_t T = 12, H = 64, I = 32, E = 4;
  MoeArgs a = small_moe(r, WeightFormat::kFp8Channel, T, H, I, E, false);
  a.gate_up.act = a.down.act = ActQuant::kFp8Token;
  MoeArgs g = a;
  g.out = host_tensor(ScalarType::kBF16, {T, H});
  g.expert_in_fp8 = host_fp8_rows(T, H);
  be->quantize_fp8_rows(g.expert_in, g.expert_in_fp8);
  be->moe(a);
  be->moe(g);
  for (int64_t i = 0; i < T * H; ++i) ASSERT_EQ(g.out.ptr<uint16_t>()[i], a.out.ptr<uint16_t>()[i]) << i;
  MoeArgs bad = g;  // rows for experts that do not run W8A8
  bad.gate_up.act = ActQuant::kNone;
  EXPECT_THROW(be->moe(bad), Error);
}

}  // namespace
}  // namespace dgemma
