#pragma once
// RGBA -> RGB as the reference's server does it: the image pasted over a solid background (white by
// default) through its alpha channel, with PIL's integer blend
//   out = (bg * (255 - a) + fg * a + 128 + ((bg * (255 - a) + fg * a + 128) >> 8)) >> 8
// (a rounding division by 255). RGB images pass through unchanged.
#include <array>
#include <cstdint>

#include "image/image.h"

namespace dgemma {

using Rgb = std::array<uint8_t, 3>;
constexpr Rgb kWhite{255, 255, 255};

Image to_rgb(Image image, Rgb background = kWhite);

// The blend of one channel (exposed for tests).
inline uint8_t blend_over(uint8_t background, uint8_t foreground, uint8_t alpha) {
  const unsigned t = unsigned{background} * (255u - alpha) + unsigned{foreground} * alpha + 128u;
  return static_cast<uint8_t>((t + (t >> 8)) >> 8);
}

}  // namespace dgemma
