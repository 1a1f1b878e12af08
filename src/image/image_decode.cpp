#include "image/image_decode.h"

#include <cstring>

#include "image/decoders.h"
#include "util/error.h"

namespace dgemma {

const char* image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kGif:
      return "GIF";
  }
  return "?";
}

std::optional<ImageFormat> sniff_image_format(std::span<const uint8_t> b) {
  auto starts = [&](const char* sig, size_t n, size_t at = 0) {
    return b.size() >= at + n && std::memcmp(b.data() + at, sig, n) == 0;
  };
  if (starts("\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  if (starts("\xff\xd8\xff", 3)) return ImageFormat::kJpeg;
  if (starts("RIFF", 4) && starts("WEBP", 4, 8)) return ImageFormat::kWebp;
  if (starts("GIF87a", 6) || starts("GIF89a", 6)) return ImageFormat::kGif;
  return std::nullopt;
}

namespace image_detail {

void check_dimensions(int64_t width, int64_t height, const ImageLimits& limits, const char* format) {
  if (width <= 0 || height <= 0)
    fail_arg("invalid {} image: it has no pixels ({}x{})", format, width, height);
  if (width > limits.max_side || height > limits.max_side)
    fail_arg("{} image of {}x{} pixels: a side exceeds the limit of {} pixels", format, width, height,
             limits.max_side);
  if (width * height > limits.max_pixels)
    fail_arg("{} image of {}x{} = {} pixels exceeds the limit of {} pixels (decompression bomb?)", format,
             width, height, width * height, limits.max_pixels);
}

}  // namespace image_detail

DecodedImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  if (bytes.empty()) fail_arg("the image is empty (0 bytes)");
  if (bytes.size() > limits.max_bytes)
    fail_arg("the image is {} bytes, over the limit of {} bytes", bytes.size(), limits.max_bytes);
  const std::optional<ImageFormat> format = sniff_image_format(bytes);
  if (!format) fail_arg("the data is not an image in a supported format (PNG, JPEG, WebP, GIF)");
  DecodedImage out;
  out.format = *format;
  switch (*format) {
    case ImageFormat::kPng:
      out.image = image_detail::decode_png(bytes, limits);
      break;
    case ImageFormat::kJpeg:
      out.image = image_detail::decode_jpeg(bytes, limits);
      break;
    case ImageFormat::kWebp:
      out.image = image_detail::decode_webp(bytes, limits);
      break;
    case ImageFormat::kGif:
      out.image = image_detail::decode_gif(bytes, limits);
      break;
  }
  return out;
}

}  // namespace dgemma
