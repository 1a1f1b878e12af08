#pragma once
// The rotation of one NeoX RoPE block in bf16 arithmetic, as the reference computes
// (x * cos) + (rotate_half(x) * sin): channel j pairs with j + half, each product and each sum rounded to
// bf16; c / s are the bf16-rounded cos / sin of the block's angles. Shared by the 1-D and 2-D RoPE ops.
#include <cstdint>

#include "util/bf16.h"

namespace dgemma {

inline void rope_rotate_block(uint16_t* v, int64_t half, const float* c, const float* s) {
  for (int64_t j = 0; j < half; ++j) {
    const float x1 = bf16_to_f32(v[j]), x2 = bf16_to_f32(v[j + half]);
    const float o1 = round_bf16(round_bf16(x1 * c[j]) + round_bf16(-x2 * s[j]));
    const float o2 = round_bf16(round_bf16(x2 * c[j]) + round_bf16(x1 * s[j]));
    v[j] = f32_to_bf16(o1);
    v[j + half] = f32_to_bf16(o2);
  }
}

}  // namespace dgemma
