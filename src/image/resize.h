#pragma once
// The reference's resampler, bit for bit: PyTorch's CPU kernel for uint8 images with mode="bicubic",
// antialias=True, align_corners=False (what the Gemma 4 image processor runs through torchvision). It is
// separable: a horizontal pass into a uint8 image, then a vertical one, each skipped when its size does
// not change. Each axis has, per output index i, a window of inputs [first, first + count) and int16
// fixed-point weights (weights_precision fractional bits); an output is
//   clamp((2^(p-1) + sum_j w_j * in[first + j]) >> p, 0, 255)
// computed in int32 per channel. The weights are the normalised Keys cubic (a = -0.5) stretched by the
// downscale factor, in double precision, converted to int16 with the largest precision p <= 22 that keeps
// the largest weight representable, rounding half away from zero.
#include <cstdint>
#include <vector>

#include "image/image.h"

namespace dgemma {

struct ResampleAxis {
  int64_t in = 0, out = 0;
  int64_t taps = 0;  // weights stored per output (zeros past count)
  unsigned precision = 0;
  std::vector<int64_t> first, count;  // [out]
  std::vector<int16_t> weights;       // [out, taps]
};

ResampleAxis bicubic_antialias_axis(int64_t in, int64_t out);

// image: RGB or RGBA (channels resampled independently); out_height, out_width >= 1.
Image resize_bicubic_antialias(const Image& image, int64_t out_height, int64_t out_width);

}  // namespace dgemma
