#pragma once
// The vision encoder (Gemma 4's) and its projection into the language model, on the Backend ops:
//   patch embed   h = bf16(2 v / 255 - 1) . input_proj^T + (T[0][x] + T[1][y])     (v: uint8 pixels)
//   L layers      h += post_attn_norm(o_proj(attn(input_norm(h))));
//                 h += post_ff_norm(down(gelu_tanh(gate(x)) * up(x))),  x = pre_ff_norm(h)
//                 attention: q / k per-head norms then 2-D RoPE (columns, rows), v normed without weight,
//                 scale 1, bidirectional over the patches of the same image
//   pooler        k x k averages of the patch grid, x sqrt(H), standardize (std_bias, std_scale)
//   embed_vision  norm without weight, then the projection to the text hidden size
// Each image runs unpadded, on its own patches; several images share every GEMM of a call.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/vision_weights.h"

namespace dgemma {

// One image's patches (image/image_processor.h PatchedImage): patch n is at column n % grid_w, row
// n / grid_w, and holds its patch_size^2 pixels row by row, each R, G, B.
struct VisionImageInput {
  int64_t grid_h = 0, grid_w = 0;
  std::span<const uint8_t> patches;  // [grid_h * grid_w, 3 patch_size^2]
};

class VisionTower {
 public:
  // config.has_vision and weights loaded for it; both must outlive the tower.
  VisionTower(const ModelConfig& config, const VisionWeights& weights, Backend& backend);

  // Soft tokens of one image: grid_h * grid_w / k^2. Throws Error(kInvalidArgument) when the tower cannot
  // take the image (grid not a multiple of the pooling kernel, beyond the position table, patches of the
  // wrong size).
  int64_t soft_tokens(const VisionImageInput& image) const;

  // The images' soft tokens, in order: bf16 [sum of soft_tokens, text hidden] on the backend's device.
  Tensor encode(std::span<const VisionImageInput> images) const;

  // Receives the named intermediates of encode (vision.patch_embed, vision.layerN, vision.pooled (the
  // bf16 averages), vision.standardized, vision.soft_tokens).
  void set_dump_hook(std::function<void(const std::string&, const Tensor&)> hook) { dump_ = std::move(hook); }

  // bf16(2 * (float(v) * float(1/255) - 0.5)) for v in 0..255: the processor's rescale then the tower's 2x
  // - 1.
  static uint16_t pixel_input(uint8_t v);

 private:
  void dump(const std::string& name, const Tensor& t) const {
    if (dump_) dump_(name, t);
  }
  void layer(const VisionLayerWeights& L, const Tensor& h, const Tensor& positions, const Tensor& items,
             std::span<const AttentionItem> host_items) const;

  const ModelConfig& config_;
  const VisionWeights& weights_;
  Backend& backend_;
  Tensor inv_freq_;  // f32 [head_dim / 4]
  std::function<void(const std::string&, const Tensor&)> dump_;
};

}  // namespace dgemma
