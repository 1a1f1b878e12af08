#include "image/image_processor.h"

#include <cmath>
#include <cstring>

#include "image/image_decode.h"
#include "image/resize.h"
#include "util/error.h"

namespace dgemma {

bool is_supported_soft_tokens(int n) {
  for (int s : kSupportedSoftTokens)
    if (s == n) return true;
  return false;
}

TargetSize aspect_preserving_size(int64_t height, int64_t width, const ImageProcessing& p) {
  DG_CHECK(height > 0 && width > 0 && p.patch_size > 0 && p.pooling_kernel_size > 0 && p.max_soft_tokens > 0);
  const int64_t k = p.pooling_kernel_size;
  const int64_t max_patches = int64_t{p.max_soft_tokens} * k * k;
  const int64_t target_px = max_patches * p.patch_size * p.patch_size;
  // In double precision and in the reference's order of operations.
  const double factor = std::sqrt(static_cast<double>(target_px) / static_cast<double>(height * width));
  const double ideal_h = factor * static_cast<double>(height), ideal_w = factor * static_cast<double>(width);
  const int64_t cell = k * p.patch_size;
  int64_t h = static_cast<int64_t>(std::floor(ideal_h / static_cast<double>(cell))) * cell;
  int64_t w = static_cast<int64_t>(std::floor(ideal_w / static_cast<double>(cell))) * cell;
  if (h == 0 && w == 0) fail_arg("cannot resize a {}x{} image to a 0x0 image", height, width);
  const int64_t max_side = (max_patches / (k * k)) * cell;
  if (h == 0) {
    h = cell;
    w = std::min(
        static_cast<int64_t>(std::floor(static_cast<double>(width) / static_cast<double>(height))) * cell,
        max_side);
  } else if (w == 0) {
    w = cell;
    h = std::min(
        static_cast<int64_t>(std::floor(static_cast<double>(height) / static_cast<double>(width))) * cell,
        max_side);
  }
  if (h * w > target_px)
    fail_arg("resizing a {}x{} image to {}x{} exceeds {} patches of {} pixels", height, width, h, w,
             max_patches, p.patch_size);
  return {h, w};
}

std::vector<uint8_t> patchify(const Image& rgb, int patch) {
  DG_CHECK(rgb.channels == 3 && rgb.width % patch == 0 && rgb.height % patch == 0);
  const int64_t gw = rgb.width / patch, gh = rgb.height / patch, row_bytes = int64_t{patch} * 3;
  std::vector<uint8_t> out(static_cast<size_t>(rgb.width * rgb.height * 3));
  uint8_t* o = out.data();
  for (int64_t py = 0; py < gh; ++py)
    for (int64_t px = 0; px < gw; ++px)
      for (int64_t r = 0; r < patch; ++r, o += row_bytes)
        std::memcpy(o, rgb.row(py * patch + r) + px * row_bytes, static_cast<size_t>(row_bytes));
  return out;
}

PatchedImage preprocess_image(const Image& rgb, const ImageProcessing& p) {
  DG_CHECK(rgb.channels == 3);
  const TargetSize t = aspect_preserving_size(rgb.height, rgb.width, p);
  PatchedImage out;
  out.height = t.height;
  out.width = t.width;
  out.grid_h = t.height / p.patch_size;
  out.grid_w = t.width / p.patch_size;
  out.soft_tokens = out.num_patches() / (int64_t{p.pooling_kernel_size} * p.pooling_kernel_size);
  if (t.height == rgb.height && t.width == rgb.width) {
    out.patches = patchify(rgb, p.patch_size);
  } else {
    out.patches = patchify(resize_bicubic_antialias(rgb, t.height, t.width), p.patch_size);
  }
  return out;
}

PatchedImage process_image_bytes(std::span<const uint8_t> bytes, const ImageProcessing& p,
                                 const ImageLimits& limits, Rgb background) {
  return preprocess_image(to_rgb(decode_image(bytes, limits).image, background), p);
}

}  // namespace dgemma
