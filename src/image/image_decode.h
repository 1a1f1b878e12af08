#pragma once
// Bytes -> pixels: PNG (libpng), JPEG (libjpeg-turbo), WebP (libwebp) and GIF (giflib, first frame),
// recognised by their signature whatever the caller says the type is (as PIL sniffs). Each decoder
// reproduces what PIL's Image.open + the reference's mode conversion yield (docs/IMAGES.md).
// Every failure is an Error(kInvalidArgument) naming the problem; nothing is allocated beyond the limits.
#include <cstdint>
#include <optional>
#include <span>

#include "image/image.h"

namespace dgemma {

// The format of a file from its first bytes; nullopt when it is none of the supported ones.
std::optional<ImageFormat> sniff_image_format(std::span<const uint8_t> bytes);

DecodedImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits = {});

}  // namespace dgemma
