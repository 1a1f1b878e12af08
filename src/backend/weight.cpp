#include "backend/weight.h"

#include <cmath>

namespace dgemma {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kFp8Channel: return "fp8-e4m3-channel";
    case WeightFormat::kNvfp4: return "nvfp4";
  }
  return "?";
}

std::string Weight::describe() const {
  std::string s = weight_format_name(format);
  s += " [";
  for (int i = 0; i < data.ndim; ++i) s += (i ? ", " : "") + std::to_string(i == data.ndim - 1 ? cols() : data.dim(i));
  s += "]";
  if (act == ActQuant::kFp8Token) s += " (fp8 per-token activations)";
  return s;
}

float e2m1_value(uint8_t nibble) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kMagnitude[nibble & 7];
  return (nibble & 8) ? -m : m;
}

uint8_t f32_to_f8e4m3(float x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7e;  // saturate (448 = 1.75 * 2^8 is the largest finite value)
  if (a < std::ldexp(1.0f, -6)) {       // subnormals: steps of 2^-9; 8 steps round up to the smallest normal
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  }
  int ex = 0;
  const float f = std::frexp(a, &ex);  // a = f * 2^ex, f in [0.5, 1)
  int e = ex - 1;
  int mant = static_cast<int>(std::nearbyint((2.0f * f - 1.0f) * 8.0f));  // exact products: ties to even
  if (mant == 8) {
    mant = 0;
    ++e;
  }
  const int code = ((e + 7) << 3) | mant;
  return sign | static_cast<uint8_t>(code > 0x7e ? 0x7e : code);
}

}  // namespace dgemma
