#include "model/vision_tower.h"

#include <cmath>
#include <cstring>

#include "model/diffusion_gemma.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma {

uint16_t VisionTower::pixel_input(uint8_t v) {
  const float rescaled = static_cast<float>(v) * static_cast<float>(1.0 / 255.0);
  return f32_to_bf16(2.0f * (rescaled - 0.5f));
}

VisionTower::VisionTower(const ModelConfig& config, const VisionWeights& weights, Backend& backend)
    : config_(config), weights_(weights), backend_(backend) {
  DG_CHECK(config.has_vision && !weights.empty());
  // Each half of a head (columns, rows) is a RoPE block of head_dim / 2 channels with the frequencies of
  // a head of that size.
  const std::vector<float> inv = rope_inv_freq(RopeParams{RopeType::kDefault, config.vision.rope_theta, 1.0},
                                               config.vision.head_dim / 2);
  Tensor host = host_tensor(ScalarType::kF32, {static_cast<int64_t>(inv.size())});
  std::copy(inv.begin(), inv.end(), host.ptr<float>());
  inv_freq_ = backend_.upload(host);
}

int64_t VisionTower::soft_tokens(const VisionImageInput& image) const {
  const VisionConfig& v = config_.vision;
  const int64_t k = v.pooling_kernel_size, patch_values = 3 * int64_t{v.patch_size} * v.patch_size;
  if (image.grid_h <= 0 || image.grid_w <= 0 || image.grid_h % k != 0 || image.grid_w % k != 0)
    fail_arg("image of {}x{} patches: the sides must be positive multiples of the pooling kernel ({})",
             image.grid_h, image.grid_w, k);
  if (image.grid_h > v.position_embedding_size || image.grid_w > v.position_embedding_size)
    fail_arg("image of {}x{} patches exceeds the vision tower's position table ({} per side)", image.grid_h,
             image.grid_w, v.position_embedding_size);
  if (static_cast<int64_t>(image.patches.size()) != image.grid_h * image.grid_w * patch_values)
    fail_arg("image of {}x{} patches has {} pixel values, expected {}", image.grid_h, image.grid_w,
             image.patches.size(), image.grid_h * image.grid_w * patch_values);
  return image.grid_h * image.grid_w / (k * k);
}

void VisionTower::layer(const VisionLayerWeights& L, const Tensor& h, const Tensor& positions,
                        const Tensor& items, std::span<const AttentionItem> host_items) const {
  const VisionConfig& v = config_.vision;
  const int64_t N = h.dim(0), H = v.hidden_size, D = v.head_dim, Hq = v.num_attention_heads,
                Hkv = v.num_key_value_heads, I = v.intermediate_size;
  const float eps = static_cast<float>(v.rms_norm_eps);
  Backend& be = backend_;
  Tensor x = be.alloc(ScalarType::kBF16, {N, H});
  be.rmsnorm(h, &L.input_norm, eps, x);
  Tensor q = be.alloc(ScalarType::kBF16, {N, Hq, D}), k = be.alloc(ScalarType::kBF16, {N, Hkv, D}),
         val = be.alloc(ScalarType::kBF16, {N, Hkv, D});
  be.matmul(x, L.q_proj, q);
  be.matmul(x, L.k_proj, k);
  be.matmul(x, L.v_proj, val);
  Tensor qn = be.alloc(ScalarType::kBF16, {N, Hq, D}), kn = be.alloc(ScalarType::kBF16, {N, Hkv, D}),
         vn = be.alloc(ScalarType::kBF16, {N, Hkv, D});
  be.rmsnorm(q, &L.q_norm, eps, qn);
  be.rmsnorm(k, &L.k_norm, eps, kn);
  be.rmsnorm(val, nullptr, eps, vn);
  be.rope_2d(qn, positions, inv_freq_);
  be.rope_2d(kn, positions, inv_freq_);
  Tensor heads = be.alloc(ScalarType::kBF16, {N, Hq, D});
  AttentionBatchArgs a;
  a.q = qn;
  a.k_new = kn;
  a.v_new = vn;
  a.items = items;
  a.host_items = host_items;
  a.scaling = 1.0f;
  a.out = heads;
  be.attention_batch(a);
  Tensor o = be.alloc(ScalarType::kBF16, {N, H}), o_normed = be.alloc(ScalarType::kBF16, {N, H});
  be.matmul(heads.reshape({N, Hq * D}), L.o_proj, o);
  be.rmsnorm(o, &L.post_attn_norm, eps, o_normed);
  be.add(h, o_normed, h);
  be.rmsnorm(h, &L.pre_ff_norm, eps, x);
  Tensor gate = be.alloc(ScalarType::kBF16, {N, I}), up = be.alloc(ScalarType::kBF16, {N, I}),
         act = be.alloc(ScalarType::kBF16, {N, I});
  be.matmul(x, L.mlp_gate, gate);
  be.matmul(x, L.mlp_up, up);
  be.gelu_mul(gate, up, act);
  be.matmul(act, L.mlp_down, o);
  be.rmsnorm(o, &L.post_ff_norm, eps, o_normed);
  be.add(h, o_normed, h);
}

Tensor VisionTower::encode(std::span<const VisionImageInput> images) const {
  const VisionConfig& v = config_.vision;
  const int64_t H = v.hidden_size, P = v.position_embedding_size,
                values = 3 * int64_t{v.patch_size} * v.patch_size;
  if (images.empty()) fail_arg("no image to encode");
  int64_t N = 0, S = 0;
  for (const VisionImageInput& im : images) {
    S += soft_tokens(im);
    N += im.grid_h * im.grid_w;
  }
  // Host inputs: the pixels through the 2x - 1 table, the patch positions and the position-table rows.
  static const std::vector<uint16_t> lut = [] {
    std::vector<uint16_t> t(256);
    for (int i = 0; i < 256; ++i) t[static_cast<size_t>(i)] = pixel_input(static_cast<uint8_t>(i));
    return t;
  }();
  Tensor pixels = host_tensor(ScalarType::kBF16, {N, values});
  Tensor positions = host_tensor(ScalarType::kI32, {N, 2});
  Tensor rows_x = host_tensor(ScalarType::kI32, {N}), rows_y = host_tensor(ScalarType::kI32, {N});
  std::vector<AttentionItem> items;
  std::vector<VisionPoolItem> pool_items;
  int64_t row = 0, out_row = 0;
  for (const VisionImageInput& im : images) {
    uint16_t* px = pixels.ptr<uint16_t>() + row * values;
    for (size_t i = 0; i < im.patches.size(); ++i) px[i] = lut[im.patches[i]];
    for (int64_t n = 0; n < im.grid_h * im.grid_w; ++n) {
      const int32_t x = static_cast<int32_t>(n % im.grid_w), y = static_cast<int32_t>(n / im.grid_w);
      positions.ptr<int32_t>()[2 * (row + n)] = x;
      positions.ptr<int32_t>()[2 * (row + n) + 1] = y;
      rows_x.ptr<int32_t>()[row + n] = x;
      rows_y.ptr<int32_t>()[row + n] = static_cast<int32_t>(P) + y;
    }
    AttentionItem it;
    it.q_first = static_cast<int32_t>(row);
    it.q_len = static_cast<int32_t>(im.grid_h * im.grid_w);
    items.push_back(it);
    pool_items.push_back({static_cast<int32_t>(row), static_cast<int32_t>(im.grid_h),
                          static_cast<int32_t>(im.grid_w), static_cast<int32_t>(out_row)});
    row += im.grid_h * im.grid_w;
    out_row += im.grid_h * im.grid_w / (int64_t{v.pooling_kernel_size} * v.pooling_kernel_size);
  }
  Tensor items_host =
      host_tensor(ScalarType::kI32, {static_cast<int64_t>(items.size()), kAttentionItemFields});
  std::memcpy(items_host.data, items.data(), items.size() * sizeof(AttentionItem));

  Backend& be = backend_;
  const Tensor d_positions = be.upload(positions), d_items = be.upload(items_host);
  // Patch embedding plus the column and row position embeddings (the table read as [2 P, H]).
  Tensor h = be.alloc(ScalarType::kBF16, {N, H}), pos_x = be.alloc(ScalarType::kBF16, {N, H}),
         pos_y = be.alloc(ScalarType::kBF16, {N, H});
  be.matmul(be.upload(pixels), weights_.patch_proj, h);
  const Tensor table = weights_.position_table.reshape({2 * P, H});
  be.embed(be.upload(rows_x), table, 1.0f, pos_x);
  be.embed(be.upload(rows_y), table, 1.0f, pos_y);
  be.add(pos_x, pos_y, pos_x);
  be.add(h, pos_x, h);
  dump("vision.patch_embed", h);
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    layer(weights_.layers[i], h, d_positions, d_items, items);
    dump("vision.layer" + std::to_string(i), h);
  }

  VisionPoolArgs pool;
  pool.x = h;
  pool.items = pool_items;
  pool.kernel = v.pooling_kernel_size;
  if (dump_) {  // the bare averages, for comparisons
    pool.out = be.alloc(ScalarType::kBF16, {S, H});
    be.vision_pool(pool);
    dump("vision.pooled", pool.out);
  }
  pool.scale = static_cast<float>(std::sqrt(static_cast<double>(H)));
  pool.std_bias = weights_.std_bias;
  pool.std_scale = weights_.std_scale;
  pool.out = be.alloc(ScalarType::kBF16, {S, H});
  be.vision_pool(pool);
  dump("vision.standardized", pool.out);

  Tensor normed = be.alloc(ScalarType::kBF16, {S, H});
  be.rmsnorm(pool.out, nullptr, static_cast<float>(v.rms_norm_eps), normed);
  Tensor soft = be.alloc(ScalarType::kBF16, {S, config_.text.hidden_size});
  be.matmul(normed, weights_.embed_projection, soft);
  dump("vision.soft_tokens", soft);
  return soft;
}

}  // namespace dgemma
