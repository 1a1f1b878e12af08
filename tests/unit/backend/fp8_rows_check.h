#pragma once
// The check of a kernel that writes FP8 rows (backend.h Fp8Rows) beside its bf16 output, for the emulated
// kernel tests: its codes and scales must equal, byte for byte, what quantize_fp8_rows_kernel
// (src/backend/cuda/quant/fp8_quant_kernel.cuh, the kernel of launch_quantize_fp8_rows, run through
// cuda_emulator.h) and the CPU reference (quant_ref::quantize_fp8_codes) write for that bf16 output.
// Include after cuda_emulator.h and the kernel headers.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/quant_reference.h"
#include "util/bf16.h"

namespace dgemma::fp8_rows_check {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// bf16 rows x [T, K] (K a multiple of 8); codes [T, K] and scales [T] the kernel under test wrote.
inline void expect_fp8_rows_of(const std::string& what, const uint16_t* x, int64_t T, int64_t K,
                               const uint8_t* codes, const float* scales) {
  // quantize_fp8_rows_kernel with the row layout launch_quantize_fp8_rows picks.
  const int64_t words = K / 8;
  std::vector<uint32_t> kq(static_cast<size_t>(T * K / 4), 0xdeadbeefu);
  std::vector<float> ks(static_cast<size_t>(T), -1.0f);
  const auto* xv = reinterpret_cast<const uint4*>(x);
  const int w = cuda::fp8_quant_row_warps(words);
  emu::launch(
      [&] {
        if (w == 4)
          cuda::quantize_fp8_rows_kernel<4>(xv, T, words, kq.data(), ks.data());
        else if (w == 2)
          cuda::quantize_fp8_rows_kernel<2>(xv, T, words, kq.data(), ks.data());
        else
          cuda::quantize_fp8_rows_kernel<1>(xv, T, words, kq.data(), ks.data());
      },
      static_cast<int>(cuda::fp8_quant_blocks(T, w)), 1, 0, 32 * cuda::kFp8QuantWarps);
  // The CPU reference.
  std::vector<float> xf(static_cast<size_t>(T * K));
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = bf16_to_f32(x[i]);
  std::vector<uint8_t> rq(xf.size());
  std::vector<float> rs(static_cast<size_t>(T));
  quant_ref::quantize_fp8_codes(xf.data(), T, K, rq.data(), rs.data());
  const auto* kc = reinterpret_cast<const uint8_t*>(kq.data());
  for (int64_t t = 0; t < T; ++t) {
    ASSERT_EQ(bits_of(scales[t]), bits_of(ks[static_cast<size_t>(t)]))
        << what << ": scale of row " << t << " (kernel)";
    ASSERT_EQ(bits_of(scales[t]), bits_of(rs[static_cast<size_t>(t)]))
        << what << ": scale of row " << t << " (CPU)";
  }
  for (int64_t i = 0; i < T * K; ++i) {
    ASSERT_EQ(codes[i], kc[i]) << what << ": code " << i << " (value " << xf[static_cast<size_t>(i)]
                               << ", kernel)";
    ASSERT_EQ(codes[i], rq[static_cast<size_t>(i)]) << what << ": code " << i << " (CPU)";
  }
}

}  // namespace dgemma::fp8_rows_check
