// The image path against the reference's fixtures (tests/fixtures/image, made by
// tools/golden/make_image_fixtures.py): decoding as the reference server decodes (exact; lossy formats
// within 1 level, reported), the processor's target sizes and soft-token counts (exact), its uint8 resize
// (bit for bit) and pixel values / positions (exact), and the tiny model's vision tower (every
// intermediate within bf16 noise of the reference's bfloat16 run, and close to its float32 run) and the
// merged input embeddings of a prompt holding three images (soft tokens scattered unscaled).
// Without the fixture directory every test fails: CMake registers this binary with CTest only once the
// directory exists.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>

#include "image/composite.h"
#include "image/image_decode.h"
#include "image/image_processor.h"
#include "image/resize.h"
#include "model/config.h"
#include "model/vision_tower.h"
#include "model/weights.h"
#include "util/bf16.h"
#include "util/json.h"
#include "util/mmap_file.h"
#include "util/npy.h"
#include "util/sha256.h"

namespace dgemma {
namespace {

const std::string kDir = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/image";

const Json& manifest() {
  static const Json m = parse_json(read_text_file(kDir + "/manifest.json"), "image fixture manifest", true);
  return m;
}

std::vector<uint8_t> read_bytes(const std::string& rel) {
  std::ifstream f(kDir + "/" + rel, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + kDir + "/" + rel);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::string hex_sha(const Image& im) {
  return sha256_hex(std::string_view(reinterpret_cast<const char*>(im.pixels.data()), im.pixels.size()));
}

Image rgb_png(const std::string& rel) {
  return to_rgb(decode_image(read_bytes(rel)).image);
}

Image drop_alpha(const Image& rgba) {
  Image out;
  out.width = rgba.width;
  out.height = rgba.height;
  for (int64_t i = 0; i < rgba.pixel_count(); ++i)
    out.pixels.insert(out.pixels.end(), rgba.pixels.begin() + 4 * i, rgba.pixels.begin() + 4 * i + 3);
  return out;
}

struct PixelDiff {
  int64_t differing = 0;
  int max = 0;
};
PixelDiff pixel_diff(const Image& a, const Image& b) {
  PixelDiff d;
  for (size_t i = 0; i < std::min(a.pixels.size(), b.pixels.size()); ++i) {
    const int v = std::abs(int{a.pixels[i]} - int{b.pixels[i]});
    d.differing += v != 0;
    d.max = std::max(d.max, v);
  }
  return d;
}

// The pixels the reference decoded (its PNG, or the input itself for RGB PNG files, whose decoding the
// decode test checks against the reference's hash).
Image reference_decoded(const Json& c) {
  return c["decoded"].contains("png") ? rgb_png(c["decoded"]["png"].get<std::string>())
                                      : to_rgb(decode_image(read_bytes(c["file"].get<std::string>())).image);
}

TEST(ImageGolden, DecodingMatchesTheReferenceServer) {
  ASSERT_GT(manifest()["preprocess"].size(), 20u);
  for (const Json& c : manifest()["preprocess"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const DecodedImage d = decode_image(read_bytes(c["file"].get<std::string>()));
    const Image rgb = to_rgb(d.image);
    ASSERT_EQ(rgb.height, c["decoded"]["height"].get<int64_t>());
    ASSERT_EQ(rgb.width, c["decoded"]["width"].get<int64_t>());
    EXPECT_EQ(d.image.channels == 4, c["pil_mode"] == "RGBA") << "RGBA exactly where PIL opens RGBA";
    if (hex_sha(rgb) != c["decoded"]["sha256"].get<std::string>()) {
      ASSERT_TRUE(c["decoded"].contains("png")) << "decoded pixels differ (no reference pixels to compare)";
      const PixelDiff diff = pixel_diff(rgb, rgb_png(c["decoded"]["png"].get<std::string>()));
      std::printf("  %s: %lld values differ from the reference decode, by at most %d\n", name.c_str(),
                  static_cast<long long>(diff.differing), diff.max);
      EXPECT_FALSE(c["lossless"].get<bool>()) << "a lossless format must decode exactly";
      EXPECT_LE(diff.max, 1) << "lossy decoding may differ by 1 level at most";
    }
    if (c.contains("drop_alpha")) {
      EXPECT_EQ(hex_sha(drop_alpha(d.image)), c["drop_alpha"]["sha256"].get<std::string>());
    }
  }
}

TEST(ImageGolden, PreprocessingMatchesTheProcessorBitForBit) {
  int resized = 0;
  for (const Json& c : manifest()["preprocess"]) {
    const std::string name = c["name"];
    const Image src = reference_decoded(c);
    for (const Json& b : c["budgets"]) {
      const int s = b["max_soft_tokens"];
      SCOPED_TRACE(name + " S=" + std::to_string(s));
      ImageProcessing p;
      p.max_soft_tokens = s;
      const TargetSize t = aspect_preserving_size(src.height, src.width, p);
      ASSERT_EQ(t.height, b["height"].get<int64_t>());
      ASSERT_EQ(t.width, b["width"].get<int64_t>());
      const PatchedImage pi = preprocess_image(src, p);
      EXPECT_EQ(pi.soft_tokens, b["soft_tokens"].get<int64_t>());
      ASSERT_EQ(b["resized"].get<bool>(), t.height != src.height || t.width != src.width);
      const Image r = b["resized"].get<bool>() ? resize_bicubic_antialias(src, t.height, t.width) : src;
      resized += b["resized"].get<bool>();
      if (hex_sha(r) != b["sha256"].get<std::string>()) {
        std::string detail = "no reference pixels stored";
        if (b.contains("png")) {
          const PixelDiff diff = pixel_diff(r, rgb_png(b["png"].get<std::string>()));
          detail = std::to_string(diff.differing) + " values differ, by at most " + std::to_string(diff.max);
        }
        ADD_FAILURE() << "the resize differs from the reference: " << detail;
      }
      if (b.contains("pixel_values")) {
        const NpyArray pv = read_npy(kDir + "/" + b["pixel_values"].get<std::string>());
        const NpyArray pos = read_npy(kDir + "/" + b["positions"].get<std::string>());
        ASSERT_EQ(pv.numel(), static_cast<int64_t>(pi.patches.size()));
        const std::vector<float> want = pv.as_float();
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(rescaled_pixel(pi.patches[i]), want[i]) << "pixel value " << i;
        const std::vector<int64_t> xy = pos.as_int();
        ASSERT_EQ(static_cast<int64_t>(xy.size()), 2 * pi.num_patches());
        for (int64_t n = 0; n < pi.num_patches(); ++n) {
          EXPECT_EQ(xy[static_cast<size_t>(2 * n)], n % pi.grid_w);
          EXPECT_EQ(xy[static_cast<size_t>(2 * n + 1)], n / pi.grid_w);
        }
      }
    }
  }
  EXPECT_GT(resized, 40);
}

// Per-row cosine similarity and the largest difference relative to the reference's largest value.
struct Closeness {
  double min_cos = 1, max_rel = 0;
};
Closeness closeness(const std::vector<float>& got, const std::vector<float>& want, int64_t width) {
  Closeness c;
  double scale = 1e-12;
  for (float v : want) scale = std::max(scale, std::fabs(static_cast<double>(v)));
  for (size_t r = 0; r * width < want.size(); ++r) {
    double dot = 0, ng = 0, nw = 0;
    for (int64_t i = 0; i < width; ++i) {
      const double g = got[r * width + i], w = want[r * width + i];
      dot += g * w;
      ng += g * g;
      nw += w * w;
      c.max_rel = std::max(c.max_rel, std::fabs(g - w) / scale);
    }
    if (ng > 0 && nw > 0) c.min_cos = std::min(c.min_cos, dot / std::sqrt(ng * nw));
  }
  return c;
}

std::vector<float> floats(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) out[static_cast<size_t>(i)] = bf16_to_f32(t.ptr<uint16_t>()[i]);
  return out;
}

struct TinyModel {
  ModelConfig config;
  std::unique_ptr<Backend> backend = make_cpu_backend();
  ModelWeights weights;
  ImageProcessing processing;
  TinyModel() {
    const std::string dir = kDir + "/" + manifest()["model"]["model_dir"].get<std::string>();
    config = load_model_config(dir);
    weights = load_weights(config, dir, *backend);
    const ProcessorConfig pc = load_processor_config(dir, config.vision);
    processing = {pc.patch_size, pc.pooling_kernel_size, pc.max_soft_tokens};
  }
  PatchedImage image(const std::string& name) const {
    for (const Json& c : manifest()["preprocess"])
      if (c["name"] == name) return process_image_bytes(read_bytes(c["file"].get<std::string>()), processing);
    throw std::runtime_error("no image " + name);
  }
};

TEST(ImageGolden, VisionTowerMatchesTheReference) {
  TinyModel m;
  ASSERT_TRUE(m.config.has_vision);
  EXPECT_EQ(m.config.image_token_id, manifest()["model"]["image_token_id"].get<int>());
  VisionTower tower(m.config, m.weights.vision, *m.backend);
  const float root = static_cast<float>(std::sqrt(static_cast<double>(m.config.vision.hidden_size)));
  for (const char* dtype : {"bfloat16", "float32"}) {
    for (const Json& im : manifest()["model"]["vision"][dtype]) {
      const std::string name = im["name"];
      SCOPED_TRACE(std::string(dtype) + " " + name);
      const PatchedImage p = m.image(name);
      ASSERT_EQ(p.num_patches(), im["patches"].get<int64_t>());
      std::map<std::string, std::vector<float>> got;
      tower.set_dump_hook([&](const std::string& k, const Tensor& t) { got[k] = floats(t); });
      const VisionImageInput in{p.grid_h, p.grid_w, p.patches};
      tower.encode(std::vector<VisionImageInput>{in});
      // The reference's pooler output is the average times sqrt(H), computed in fp32.
      for (float& v : got["vision.pooled"]) v *= root;
      const std::string prefix = std::string("vision.") + dtype + "." + name + ".";
      std::vector<std::pair<std::string, std::string>> pairs = {{"vision.patch_embed", "patch_embed"},
                                                                {"vision.pooled", "pooler_out"},
                                                                {"vision.standardized", "standardized"},
                                                                {"vision.soft_tokens", "soft_tokens"}};
      for (int i = 0; i < m.config.vision.num_hidden_layers; ++i)
        pairs.emplace_back("vision.layer" + std::to_string(i), "layer" + std::to_string(i));
      for (const auto& [mine, theirs] : pairs) {
        const NpyArray ref = read_npy(kDir + "/golden/" + prefix + theirs + ".npy");
        const std::vector<float> want = ref.as_float();
        ASSERT_EQ(got[mine].size(), want.size()) << theirs;
        const Closeness c = closeness(got[mine], want, ref.shape.back());
        std::printf("  %-8s %-22s %-14s min cos %.6f  max diff / max %.3g\n", dtype, name.c_str(),
                    theirs.c_str(), c.min_cos, c.max_rel);
        // bf16 noise: the reference's own bf16 run, and its fp32 run against this bf16 computation.
        EXPECT_GE(c.min_cos, 0.999) << theirs;
        EXPECT_LE(c.max_rel, 2e-2) << theirs;
      }
    }
  }
}

// The prompt's input embeddings as the reference merges them: the text embedded and scaled (each image
// token as the pad id), the soft tokens written over the image positions unscaled, in order.
TEST(ImageGolden, SoftTokensEnterThePromptUnscaled) {
  TinyModel m;
  const Json& mm = manifest()["model"];
  VisionTower tower(m.config, m.weights.vision, *m.backend);
  std::vector<PatchedImage> images;
  for (const Json& n : mm["prompt_images"]) images.push_back(m.image(n.get<std::string>()));
  std::vector<VisionImageInput> in;
  for (const PatchedImage& p : images) in.push_back({p.grid_h, p.grid_w, p.patches});
  const std::vector<float> soft = floats(tower.encode(in));
  const std::vector<int64_t> ids = read_npy(kDir + "/golden/prompt_ids.npy").as_int();
  const int64_t H = m.config.text.hidden_size, T = static_cast<int64_t>(ids.size());
  Tensor tok = host_tensor(ScalarType::kI32, {T});
  int64_t n_image = 0;
  for (int64_t t = 0; t < T; ++t) {
    const bool image = ids[static_cast<size_t>(t)] == m.config.image_token_id;
    n_image += image;
    tok.ptr<int32_t>()[t] =
        image ? m.config.text.pad_token_id : static_cast<int32_t>(ids[static_cast<size_t>(t)]);
  }
  ASSERT_EQ(n_image * H, static_cast<int64_t>(soft.size())) << "one soft token per image token";
  Tensor emb = host_tensor(ScalarType::kBF16, {T, H});
  m.backend->embed(tok, m.weights.embed, round_bf16(std::sqrt(static_cast<float>(H))), emb);
  std::vector<float> merged = floats(emb);
  for (int64_t t = 0, s = 0; t < T; ++t)
    if (ids[static_cast<size_t>(t)] == m.config.image_token_id) {
      std::copy(soft.begin() + s * H, soft.begin() + (s + 1) * H, merged.begin() + t * H);
      ++s;
    }
  const NpyArray ref = read_npy(kDir + "/golden/encoder.generate.inputs_embeds.npy");
  const Closeness c = closeness(merged, ref.as_float(), H);
  std::printf("  merged input embeddings: min cos %.6f  max diff / max %.3g\n", c.min_cos, c.max_rel);
  EXPECT_GE(c.min_cos, 0.999);
  EXPECT_LE(c.max_rel, 2e-2);
}

}  // namespace
}  // namespace dgemma
