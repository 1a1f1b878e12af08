#pragma once
// The reference's image processor (Gemma 4, torchvision backend) up to the patches: the aspect-preserving
// target size, the uint8 resize (resize.h) when the size changes, and the patches in the order the vision
// tower reads them. The tower applies the rescale (v / 255) and 2v - 1 itself (model/vision_tower.h), so
// patches stay uint8 here. Patch n of a grid_h x grid_w grid sits at column x = n % grid_w, row
// y = n / grid_w, and holds its 16 x 16 pixels row by row, each pixel's R, G, B.
#include <cstdint>
#include <span>
#include <vector>

#include "image/composite.h"
#include "image/image.h"

namespace dgemma {

// The soft-token budgets the reference accepts (processor_config.json's max_soft_tokens, or per request).
constexpr int kSupportedSoftTokens[] = {70, 140, 280, 560, 1120};
bool is_supported_soft_tokens(int max_soft_tokens);

struct ImageProcessing {
  int patch_size = 16;
  int pooling_kernel_size = 3;
  int max_soft_tokens = 280;
};

struct TargetSize {
  int64_t height = 0, width = 0;
};
// The largest size with sides divisible by patch_size * pooling_kernel_size that keeps the aspect ratio
// and holds at most max_soft_tokens * pooling_kernel_size^2 patches (small images are enlarged); a side
// that would round to 0 becomes one cell and the other side follows the aspect ratio up to the budget.
// Throws Error(kInvalidArgument) when no such size exists.
TargetSize aspect_preserving_size(int64_t height, int64_t width, const ImageProcessing& p);

struct PatchedImage {
  int64_t height = 0, width = 0;   // after the resize
  int64_t grid_h = 0, grid_w = 0;  // patches
  int64_t soft_tokens = 0;         // grid_h * grid_w / pooling_kernel_size^2
  std::vector<uint8_t> patches;    // [grid_h * grid_w, patch_size^2 * 3]
  int64_t num_patches() const { return grid_h * grid_w; }
};

// rgb: an RGB image (channels == 3).
PatchedImage preprocess_image(const Image& rgb, const ImageProcessing& p);
// The patches of an image whose sides are multiples of patch_size.
std::vector<uint8_t> patchify(const Image& rgb, int patch_size);

// File bytes -> patches: decode (image_decode.h), RGBA over `background` (composite.h), preprocess.
PatchedImage process_image_bytes(std::span<const uint8_t> bytes, const ImageProcessing& p,
                                 const ImageLimits& limits = {}, Rgb background = kWhite);

// The processor's rescaled value of a pixel, float32(v) * float32(1 / 255) (its pixel_values).
inline float rescaled_pixel(uint8_t v) {
  return static_cast<float>(v) * static_cast<float>(1.0 / 255.0);
}

}  // namespace dgemma
