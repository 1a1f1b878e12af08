// The attention prologue kernels (src/backend/cuda/layer/qkv_prologue_kernel.cuh) run on the host through
// cuda_emulator.h: the token-loop kernel bit for bit against the row kernel (which takes the head
// counts past the token-loop kernel's block),
// and both against a scalar transcription of the layer's formulas with the kernels' functions (the
// row's sum of squares in double, (mean + eps)^-0.5 as inv_rms_of, cos / sin in double rounded once,
// every RoPE product and sum rounded to bf16). The 26B-A4B shapes (sliding: Hq 16, Hkv 8, D 256,
// 512 threads; full: K=V, Hq 16, Hkv 2, D 512, 576 threads) from the fused projection, small head
// dims (several rows a warp), a head dim whose half row is not a power of two words (idle lanes),
// separate q / k / v tensors in place, grids of one block a token and of fewer blocks than tokens
// (each block loops over tokens, loading the next ahead), up to hundreds of tokens, and a head row of
// tiny values (eps matters).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "util/bf16.h"

// The emulator first: it provides the device operations that the kernel headers use.
// clang-format off
#include "cuda_emulator.h"
#include "backend/cuda/core/bf16_words.cuh"
#include "backend/cuda/layer/qkv_prologue_kernel.cuh"
// clang-format on

namespace dgemma::cuda {
namespace {

struct Shape {
  int64_t T, Hq, Hkv, D;
  bool k_eq_v, fused;
  int grid;  // blocks of the token-loop kernel (0: one a token)
};

std::string name_of(const Shape& s) {
  return "T=" + std::to_string(s.T) + " Hq=" + std::to_string(s.Hq) + " Hkv=" + std::to_string(s.Hkv) +
         " D=" + std::to_string(s.D) + (s.k_eq_v ? " K=V" : "") + (s.fused ? " fused input" : " in place") +
         " grid=" + std::to_string(s.grid);
}

std::vector<uint16_t> random_bf16(std::mt19937& rng, int64_t n, float std, float mean = 0.0f) {
  std::normal_distribution<float> nd(mean, std);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = f32_to_bf16(nd(rng));
  return v;
}

// The layer's formulas with the kernels' functions: head row `x` (D values) normed, weighted (w may
// be null) and, with `pos` >= 0, rotated.
std::vector<uint16_t> reference_row(const uint16_t* x, const uint16_t* w, int64_t D, float eps, int32_t pos,
                                    const std::vector<float>& inv_freq) {
  double ss = 0;
  for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(bf16_to_f32(x[i])) * bf16_to_f32(x[i]);
  const float inv = inv_rms_of(ss, D, eps);
  std::vector<float> y(static_cast<size_t>(D));
  for (int64_t i = 0; i < D; ++i) {
    float v = bf16_to_f32(x[i]) * inv;
    if (w != nullptr) v = v * bf16_to_f32(w[i]);
    y[static_cast<size_t>(i)] = round_bf16(v);
  }
  std::vector<uint16_t> out(static_cast<size_t>(D));
  if (pos < 0) {
    for (int64_t i = 0; i < D; ++i) out[static_cast<size_t>(i)] = f32_to_bf16(y[static_cast<size_t>(i)]);
    return out;
  }
  const int64_t half = D / 2;
  for (int64_t j = 0; j < half; ++j) {
    const float f = inv_freq[static_cast<size_t>(j)] * static_cast<float>(pos);
    const float c = round_bf16(cos_f32(f)), s = round_bf16(sin_f32(f));
    const float x1 = y[static_cast<size_t>(j)], x2 = y[static_cast<size_t>(j + half)];
    out[static_cast<size_t>(j)] = f32_to_bf16(round_bf16(x1 * c) + round_bf16(-x2 * s));
    out[static_cast<size_t>(j + half)] = f32_to_bf16(round_bf16(x2 * c) + round_bf16(x1 * s));
  }
  return out;
}

struct Outputs {
  std::vector<uint16_t> q, k, v;
};

void check(const Shape& s, uint32_t seed) {
  const std::string name = name_of(s);
  std::mt19937 rng(seed);
  const int64_t rows = s.Hq + (s.k_eq_v ? 1 : 2) * s.Hkv, words = s.D / 8;
  // Inputs: the fused projection [T, rows * D] (q's heads, k's, then v's), or separate q / k / v.
  std::vector<uint16_t> in = random_bf16(rng, s.T * rows * s.D, 2.0f);
  for (int64_t i = 0; i < s.D; ++i) in[static_cast<size_t>(s.D + i)] = f32_to_bf16(1e-4f * bf16_to_f32(in[static_cast<size_t>(s.D + i)]));
  const std::vector<uint16_t> wq = random_bf16(rng, s.D, 0.3f, 1.0f), wk = random_bf16(rng, s.D, 0.3f, 1.0f);
  std::vector<int32_t> pos(static_cast<size_t>(s.T));
  for (auto& p : pos) p = std::uniform_int_distribution<int32_t>(0, 9000)(rng);
  std::vector<float> inv_freq(static_cast<size_t>(s.D / 2));
  for (size_t j = 0; j < inv_freq.size(); ++j)
    inv_freq[j] = 1.0f / std::pow(10000.0f, static_cast<float>(2 * j) / static_cast<float>(s.D));
  auto head_row = [&](int64_t t, int64_t r) { return in.data() + (t * rows + r) * s.D; };

  auto run = [&](bool token_loop) {
    Outputs o;
    o.q.assign(static_cast<size_t>(s.T * s.Hq * s.D), 0x7fc1);
    o.k.assign(static_cast<size_t>(s.T * s.Hkv * s.D), 0x7fc1);
    o.v.assign(static_cast<size_t>(s.T * s.Hkv * s.D), 0x7fc1);
    if (!s.fused) {  // in place: the head rows copied into q / k / v first
      for (int64_t t = 0; t < s.T; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          uint16_t* d = r < s.Hq ? o.q.data() + (t * s.Hq + r) * s.D
                        : r < s.Hq + s.Hkv ? o.k.data() + (t * s.Hkv + r - s.Hq) * s.D
                                           : o.v.data() + (t * s.Hkv + r - s.Hq - s.Hkv) * s.D;
          std::copy_n(head_row(t, r), s.D, d);
        }
    }
    auto* q = reinterpret_cast<uint4*>(o.q.data());
    auto* k = reinterpret_cast<uint4*>(o.k.data());
    auto* v = reinterpret_cast<uint4*>(o.v.data());
    const auto* fused = reinterpret_cast<const uint4*>(in.data());
    const int lanes = qkv_lanes(s.D);
    QkvLaunch a{q,
                k,
                v,
                s.fused ? fused : q,
                s.fused ? fused + s.Hq * words : k,
                s.fused ? fused + (s.Hq + s.Hkv) * words : v,
                s.fused ? rows * words : s.Hq * words,
                s.fused ? rows * words : s.Hkv * words,
                s.fused ? rows * words : s.Hkv * words,
                reinterpret_cast<const uint4*>(wq.data()),
                reinterpret_cast<const uint4*>(wk.data()),
                pos.data(),
                inv_freq.data(),
                static_cast<int>(s.Hq),
                static_cast<int>(s.Hkv),
                static_cast<int>(s.D),
                s.k_eq_v,
                1e-6f,
                s.T,
                lanes};
    if (token_loop) {
      const int threads = static_cast<int>((rows * lanes + 31) / 32 * 32);
      EXPECT_LE(threads, kQkvMaxThreads) << name;
      emu::launch([a] { qkv_prologue_kernel(a); }, s.grid > 0 ? s.grid : static_cast<int>(s.T), 1,
                  static_cast<int>(s.D * 2 * 2 * 4), threads);
    } else {
      const int warps = static_cast<int>(std::min<int64_t>(rows, 16));
      emu::launch([a] { qkv_prologue_row_kernel(a); }, static_cast<int>(s.T), 1,
                  static_cast<int>(s.D * 4 + warps * s.D * 2), warps * 32);
    }
    return o;
  };
  const Outputs got = run(true), by_row = run(false);
  EXPECT_EQ(got.q, by_row.q) << name << ": q, token-loop kernel vs row kernel";
  EXPECT_EQ(got.k, by_row.k) << name << ": k, token-loop kernel vs row kernel";
  EXPECT_EQ(got.v, by_row.v) << name << ": v, token-loop kernel vs row kernel";
  for (int64_t t = 0; t < s.T; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t p = pos[static_cast<size_t>(t)];
      auto expect = [&](const std::vector<uint16_t>& out, int64_t row, const std::vector<uint16_t>& want,
                        const char* what) {
        for (int64_t i = 0; i < s.D; ++i)
          ASSERT_EQ(out[static_cast<size_t>(row * s.D + i)], want[static_cast<size_t>(i)])
              << name << ": " << what << " token " << t << " head row " << r << " element " << i;
      };
      if (r < s.Hq) {
        expect(got.q, t * s.Hq + r, reference_row(head_row(t, r), wq.data(), s.D, 1e-6f, p, inv_freq), "q");
      } else if (r < s.Hq + s.Hkv) {
        expect(got.k, t * s.Hkv + r - s.Hq, reference_row(head_row(t, r), wk.data(), s.D, 1e-6f, p, inv_freq), "k");
        if (s.k_eq_v)
          expect(got.v, t * s.Hkv + r - s.Hq, reference_row(head_row(t, r), nullptr, s.D, 1e-6f, -1, inv_freq), "v (K=V)");
      } else {
        expect(got.v, t * s.Hkv + r - s.Hq - s.Hkv, reference_row(head_row(t, r), nullptr, s.D, 1e-6f, -1, inv_freq), "v");
      }
    }
}

TEST(QkvPrologueEmulated, SlidingLayerShape) { check({5, 16, 8, 256, false, true, 2}, 1); }
TEST(QkvPrologueEmulated, FullLayerShapeKEqV) { check({4, 16, 2, 512, true, true, 3}, 2); }
TEST(QkvPrologueEmulated, OneBlockAToken) { check({3, 16, 8, 256, false, true, 0}, 3); }
TEST(QkvPrologueEmulated, InPlaceSmallHeads) { check({9, 4, 2, 64, false, false, 4}, 4); }
TEST(QkvPrologueEmulated, HalfRowNotAPowerOfTwoWords) { check({6, 3, 1, 48, true, false, 2}, 5); }
TEST(QkvPrologueEmulated, ManyTokensFewBlocks) { check({200, 2, 1, 16, false, true, 7}, 6); }

}  // namespace
}  // namespace dgemma::cuda
