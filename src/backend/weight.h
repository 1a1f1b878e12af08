#pragma once
// A linear layer's weight with its storage format (bf16, or one of the quantised checkpoint formats,
// docs/QUANTIZATION.md). Every format is read as
//   W[n, k] = value(data[n, k]) * block(n, k / 16) * row_scale[n]
// with value() the format's code (bf16, FP8 E4M3 or E2M1), block() the NVFP4 E4M3 block scale (1 for
// the other formats) and row_scale the fp32 per-output-row scale (FP8: the channel scale; NVFP4: the
// global scale of the row's projection, so gate and up rows of a stacked expert keep their own).
// Expert weights are stacked: a leading [E] dimension on every tensor.
#include <cstdint>
#include <string>

#include "backend/tensor.h"

namespace dgemma {

enum class WeightFormat {
  kBF16,        // data bf16 [.., N, K]
  kFp8Channel,  // data f8e4m3 [.., N, K]; row_scale f32 [.., N]
  kNvfp4,       // data u8 [.., N, K/2] (element 2j in the low nibble); block f8e4m3 [.., N, K/16]; row_scale f32 [.., N]
};
const char* weight_format_name(WeightFormat f);

// Activation handling the checkpoint prescribes for the matmul input.
enum class ActQuant {
  kNone,      // bf16 activations (NVFP4 on Hopper runs W4A16: the W4A4 input scales are not used)
  kFp8Token,  // dynamic per-token FP8: s_t = amax_t / 448, x_q = e4m3(x / s_t), y = s_t * row_scale * sum(x_q * w)
};

constexpr int kNvfp4Group = 16;  // inputs per NVFP4 block scale

struct Weight {
  WeightFormat format = WeightFormat::kBF16;
  ActQuant act = ActQuant::kNone;
  Tensor data;
  Tensor block;      // NVFP4 only
  Tensor row_scale;  // FP8 and NVFP4

  Weight() = default;
  // A bf16 weight (implicit: every bf16 tensor is a weight).
  Weight(Tensor bf16) : data(std::move(bf16)) {}  // NOLINT(google-explicit-constructor)

  bool empty() const { return data.empty(); }
  bool quantized() const { return format != WeightFormat::kBF16; }
  // Logical shape: the last two dims are [N, K] (K unpacked).
  int64_t rows() const { return data.dim(-2); }
  int64_t cols() const { return format == WeightFormat::kNvfp4 ? data.dim(-1) * 2 : data.dim(-1); }
  int64_t experts() const { return data.ndim == 3 ? data.dim(0) : 1; }
  size_t nbytes() const {
    auto n = [](const Tensor& t) { return t.empty() ? size_t{0} : t.nbytes(); };
    return n(data) + n(block) + n(row_scale);
  }
  std::string describe() const;  // e.g. "nvfp4 [8, 64, 64]"
};

// Decoders of the quantised codes.
float e2m1_value(uint8_t nibble);  // low 4 bits: sign bit 3, magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6
// Nearest FP8 E4M3 (fn) code to x, ties to even, saturating at +-448 (NaN stays NaN).
uint8_t f32_to_f8e4m3(float x);

}  // namespace dgemma
