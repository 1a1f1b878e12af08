#pragma once
// The per-format decoders behind decode_image (image_decode.h), and the one dimension check they share.
#include <cstdint>
#include <span>

#include "image/image.h"

namespace dgemma::image_detail {

// Throws Error(kInvalidArgument) when a width x height image is empty or over the limits.
void check_dimensions(int64_t width, int64_t height, const ImageLimits& limits, const char* format);

Image decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits);   // png_decode.cpp
Image decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits);  // jpeg_decode.cpp
Image decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits);  // webp_decode.cpp
Image decode_gif(std::span<const uint8_t> bytes, const ImageLimits& limits);   // gif_decode.cpp

}  // namespace dgemma::image_detail
