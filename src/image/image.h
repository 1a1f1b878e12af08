#pragma once
// Decoded images and the limits every decoder enforces before it allocates pixel memory.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dgemma {

enum class ImageFormat { kPng, kJpeg, kWebp, kGif };
const char* image_format_name(ImageFormat f);

// 8-bit pixels, row-major, interleaved channels: 3 (RGB) or 4 (RGBA).
struct Image {
  int64_t width = 0;
  int64_t height = 0;
  int channels = 3;
  std::vector<uint8_t> pixels;  // height * width * channels

  int64_t pixel_count() const { return width * height; }
  const uint8_t* row(int64_t y) const { return pixels.data() + static_cast<size_t>(y * width * channels); }
  uint8_t* row(int64_t y) { return pixels.data() + static_cast<size_t>(y * width * channels); }
};

// A decoded file: RGBA only where the reference's decoder yields an RGBA image (PNG / WebP with an alpha
// channel), which is then composited (composite.h); every other mode is already RGB, its alpha or
// transparency dropped, as PIL's convert("RGB") does.
struct DecodedImage {
  ImageFormat format = ImageFormat::kPng;
  Image image;
};

// What one image may cost. Checked from the file's header, before any pixel memory is allocated: a
// file over max_bytes, a side over max_side or more than max_pixels pixels is refused.
struct ImageLimits {
  size_t max_bytes = size_t{64} << 20;
  // Sides are bounded too: the resampler's weights grow with the longer side (about 32 bytes a pixel).
  int64_t max_side = int64_t{1} << 20;
  // PIL refuses images over 2 x its MAX_IMAGE_PIXELS (89478485) as decompression bombs.
  int64_t max_pixels = 178956970;
};

}  // namespace dgemma
