// The vision side of the model without fixtures from the reference: vision_config and the processor
// settings parsed and validated, the tower's tensors loaded (or skipped for a text-only deployment) and
// refused by name when malformed, and the tower's batching (each image attends only to itself, so a batch
// gives each image exactly what it gets alone) and input checks on the fixture's tiny tower.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "model/config.h"
#include "model/safetensors.h"
#include "model/vision_tower.h"
#include "model/weights.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma {
namespace {

const std::string kTiny = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model";

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("dgemma_vision_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  static inline int counter = 0;
};

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

std::string file_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidFile) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

TEST(VisionConfig, ParsesTheCheckpointsKeysWithTheReferenceDefaults) {
  const ModelConfig c = load_model_config(kTiny);
  ASSERT_TRUE(c.has_vision);
  EXPECT_EQ(c.vision.hidden_size, 16);
  EXPECT_EQ(c.vision.intermediate_size, 32);
  EXPECT_EQ(c.vision.num_hidden_layers, 1);
  EXPECT_EQ(c.vision.head_dim, 8);
  EXPECT_EQ(c.vision.patch_size, 4);
  EXPECT_EQ(c.vision.pooling_kernel_size, 2);
  EXPECT_EQ(c.vision.position_embedding_size, 64);
  EXPECT_FALSE(c.vision.standardize);
  EXPECT_EQ(c.vision.rope_theta, 100.0);
  const VisionConfig d = parse_vision_config(Json::object(), "cfg");
  EXPECT_EQ(d.hidden_size, 768);
  EXPECT_EQ(d.num_hidden_layers, 16);
  EXPECT_EQ(d.head_dim, 64);
  EXPECT_EQ(d.patch_size, 16);
  EXPECT_EQ(d.pooling_kernel_size, 3);
  EXPECT_EQ(d.position_embedding_size, 10240);
  EXPECT_FALSE(d.standardize);
  const VisionConfig released = parse_vision_config(
      Json::parse(
          R"({"model_type":"gemma4_vision","hidden_size":1152,"intermediate_size":4304,"num_hidden_layers":27,
                      "num_attention_heads":16,"num_key_value_heads":16,"head_dim":72,"global_head_dim":72,
                      "pooling_kernel_size":3,"default_output_length":280,"use_clipped_linears":false,
                      "standardize":true,"rope_parameters":{"rope_type":"axial","rope_theta":100.0}})"),
      "cfg");
  EXPECT_EQ(released.head_dim, 72);
  EXPECT_TRUE(released.standardize);
  EXPECT_NE(file_error([] {
              parse_vision_config(Json::parse(R"({"head_dim": 10})"), "cfg");
            }).find("multiple of 4"),
            std::string::npos);
  EXPECT_NE(file_error([] {
              parse_vision_config(Json::parse(R"({"use_clipped_linears": true})"), "cfg");
            }).find("use_clipped_linears"),
            std::string::npos);
  EXPECT_NE(file_error([] {
              parse_vision_config(Json::parse(R"({"model_type": "siglip"})"), "cfg");
            }).find("siglip"),
            std::string::npos);
  EXPECT_NE(file_error([] {
              parse_vision_config(Json::parse(R"({"num_key_value_heads": 5})"), "cfg");
            }).find("num_key_value_heads"),
            std::string::npos);
}

TEST(VisionConfig, ProcessorSettingsFromEitherFile) {
  const VisionConfig v;  // patch 16, pooling 3
  TempDir dir;
  EXPECT_EQ(load_processor_config(dir.path.string(), v).max_soft_tokens, 280);  // no file: the defaults
  write_file(
      dir.path / "processor_config.json",
      R"({"image_processor": {"image_processor_type": "Gemma4ImageProcessor", "do_resize": true, "resample": 3,
                 "do_rescale": true, "rescale_factor": 0.00392156862745098, "do_normalize": false,
                 "image_mean": [0, 0, 0], "image_std": [1, 1, 1], "patch_size": 16, "pooling_kernel_size": 3,
                 "max_soft_tokens": 560}, "processor_class": "Gemma4Processor"})");
  EXPECT_EQ(load_processor_config(dir.path.string(), v).max_soft_tokens, 560);
  TempDir flat;
  write_file(flat.path / "processor_config.json", R"({"processor_class": "Gemma4Processor"})");  // no section
  write_file(flat.path / "preprocessor_config.json", R"({"max_soft_tokens": 70})");
  EXPECT_EQ(load_processor_config(flat.path.string(), v).max_soft_tokens, 70);
  auto bad = [](const char* json) {
    return file_error([&] { parse_processor_config(Json::parse(json), "proc"); });
  };
  EXPECT_NE(bad(R"({"max_soft_tokens": 300})").find("70, 140, 280, 560, 1120"), std::string::npos);
  EXPECT_NE(bad(R"({"resample": 2})").find("bicubic"), std::string::npos);
  EXPECT_NE(bad(R"({"rescale_factor": 0.5})").find("rescale_factor"), std::string::npos);
  EXPECT_NE(bad(R"({"do_normalize": true, "image_mean": [0.5, 0.5, 0.5]})").find("image_mean"),
            std::string::npos);
  EXPECT_NE(bad(R"({"image_processor_type": "SiglipImageProcessor"})").find("Siglip"), std::string::npos);
  VisionConfig other;
  other.patch_size = 14;
  EXPECT_NE(file_error([&] { load_processor_config(dir.path.string(), other); }).find("disagree"),
            std::string::npos);
}

TEST(VisionWeights, LoadedCountedOrSkipped) {
  const ModelConfig c = load_model_config(kTiny);
  auto be = make_cpu_backend();
  const ModelWeights w = load_weights(c, kTiny, *be);
  ASSERT_EQ(w.vision.layers.size(), 1u);
  EXPECT_EQ(w.vision.patch_proj.rows(), 16);
  EXPECT_EQ(w.vision.patch_proj.cols(), 48);
  EXPECT_EQ(w.vision.position_table.shape_str(), "[2, 64, 16]");
  EXPECT_EQ(w.vision.embed_projection.rows(), c.text.hidden_size);
  EXPECT_TRUE(w.vision.std_bias.empty());  // standardize=false: no buffers
  // The same count as the checkpoint's vision tensors.
  int64_t in_file = 0;
  SafetensorsCheckpoint ck(kTiny);
  for (const TensorInfo* t : ck.tensors())
    if (is_vision_tensor(t->name)) in_file += t->numel();
  EXPECT_EQ(count_vision_parameters(c), in_file);
  EXPECT_EQ(count_parameters(c).vision, in_file);
  EXPECT_EQ(vision_weight_bytes(c), static_cast<uint64_t>(2 * in_file));
  // A text-only deployment reads none of them.
  WeightLoadOptions text_only;
  text_only.vision = false;
  EXPECT_TRUE(load_weights(c, kTiny, *be, {}, text_only).vision.empty());
  EXPECT_TRUE(dummy_weights(c, *be, 1, text_only).vision.empty());
  const ModelWeights d = dummy_weights(c, *be, 1);
  ASSERT_EQ(d.vision.layers.size(), 1u);
  EXPECT_EQ(d.vision.layers[0].mlp_down.rows(), 16);
}

TEST(VisionWeights, ParameterCountOfTheReleasedTower) {
  ModelConfig c;
  c.has_vision = true;
  c.text.hidden_size = 2816;
  c.vision = parse_vision_config(
      Json::parse(
          R"({"hidden_size":1152,"intermediate_size":4304,"num_hidden_layers":27,"num_attention_heads":16,
                      "num_key_value_heads":16,"head_dim":72,"standardize":true})"),
      "cfg");
  EXPECT_EQ(expected_vision_tensors(c).size(), 4u + 13u * 27u + 1u);  // 356 tower tensors + the projection
  EXPECT_NEAR(count_vision_parameters(c) / 1e6, 572.8, 0.1);
}

TEST(VisionWeights, MalformedTensorsAreRefusedByName) {
  TempDir dir;
  std::filesystem::copy(kTiny + "/config.json", dir.path / "config.json");
  SafetensorsCheckpoint ck(kTiny);
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo* t : ck.tensors()) {
    TensorToWrite w{t->name, t->dtype, t->shape, std::vector<uint8_t>(t->data, t->data + t->nbytes)};
    if (w.name == "model.encoder.vision_tower.encoder.layers.0.self_attn.k_norm.weight") continue;  // missing
    if (w.name == "model.encoder.vision_tower.encoder.layers.0.mlp.up_proj.linear.weight") w.shape = {16, 32};
    if (w.name == "model.encoder.embed_vision.embedding_projection.weight")
      w.dtype = DType::kI32, w.shape = {32, 16};
    tensors.push_back(std::move(w));
  }
  write_safetensors((dir.path / "model.safetensors").string(), tensors);
  const ModelConfig c = load_model_config(dir.path.string());
  auto be = make_cpu_backend();
  const std::string m = file_error([&] { load_weights(c, dir.path.string(), *be); });
  EXPECT_NE(m.find("3 problem"), std::string::npos) << m;
  EXPECT_NE(m.find("layers.0.self_attn.k_norm.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("layers.0.mlp.up_proj.linear.weight in"), std::string::npos) << m;
  EXPECT_NE(m.find("embed_vision.embedding_projection.weight in"), std::string::npos) << m;
  // The header check finds the same problems without reading the data.
  std::set<std::string> used;
  std::vector<std::string> problems;
  check_vision_headers(c, SafetensorsCheckpoint(dir.path.string()), used, problems);
  EXPECT_EQ(problems.size(), 3u);
  // Text-only, the broken tower is not read at all.
  WeightLoadOptions text_only;
  text_only.vision = false;
  EXPECT_NO_THROW(load_weights(c, dir.path.string(), *be, {}, text_only));
}

std::vector<uint8_t> pixels_of(int64_t patches, int64_t values, uint32_t seed) {
  std::vector<uint8_t> p(static_cast<size_t>(patches * values));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>((i * 2654435761u + seed * 97u) >> 11);
  return p;
}

std::vector<uint16_t> to_host_bf16(Backend& be, const Tensor& t) {
  std::vector<uint16_t> out(static_cast<size_t>(t.numel()));
  be.to_host(t, out.data());
  return out;
}

TEST(VisionTower, EachImageOfABatchIsEncodedAsAlone) {
  const ModelConfig c = load_model_config(kTiny);
  auto be = make_cpu_backend();
  const ModelWeights w = load_weights(c, kTiny, *be);
  VisionTower tower(c, w.vision, *be);
  const int64_t values = 3 * 4 * 4;
  const auto pa = pixels_of(24, values, 1), pb = pixels_of(4, values, 2), pb2 = pixels_of(4, values, 3);
  const VisionImageInput a{4, 6, pa}, b{2, 2, pb}, b2{2, 2, pb2};
  EXPECT_EQ(tower.soft_tokens(a), 6);
  EXPECT_EQ(tower.soft_tokens(b), 1);
  const std::vector<uint16_t> alone_a = to_host_bf16(*be, tower.encode(std::vector<VisionImageInput>{a}));
  const std::vector<uint16_t> alone_b = to_host_bf16(*be, tower.encode(std::vector<VisionImageInput>{b}));
  std::vector<std::string> dumped;
  tower.set_dump_hook([&](const std::string& name, const Tensor&) { dumped.push_back(name); });
  const std::vector<uint16_t> both = to_host_bf16(*be, tower.encode(std::vector<VisionImageInput>{a, b}));
  const int64_t H = c.text.hidden_size;
  ASSERT_EQ(alone_a.size(), static_cast<size_t>(6 * H));
  ASSERT_EQ(both.size(), static_cast<size_t>(7 * H));
  EXPECT_TRUE(std::equal(alone_a.begin(), alone_a.end(), both.begin()));
  EXPECT_TRUE(std::equal(alone_b.begin(), alone_b.end(), both.begin() + 6 * H));
  const std::vector<std::string> names = {"vision.patch_embed", "vision.layer0", "vision.pooled",
                                          "vision.standardized", "vision.soft_tokens"};
  EXPECT_EQ(dumped, names);
  // Another second image changes only its own soft token.
  tower.set_dump_hook({});
  const std::vector<uint16_t> other = to_host_bf16(*be, tower.encode(std::vector<VisionImageInput>{a, b2}));
  EXPECT_TRUE(std::equal(alone_a.begin(), alone_a.end(), other.begin()));
  EXPECT_FALSE(std::equal(alone_b.begin(), alone_b.end(), other.begin() + 6 * H));
  for (uint16_t v : both) EXPECT_TRUE(std::isfinite(bf16_to_f32(v)));
}

TEST(VisionTower, RefusesImagesItCannotTake) {
  const ModelConfig c = load_model_config(kTiny);
  auto be = make_cpu_backend();
  const ModelWeights w = load_weights(c, kTiny, *be);
  VisionTower tower(c, w.vision, *be);
  auto error = [&](const VisionImageInput& im) {
    try {
      tower.encode(std::vector<VisionImageInput>{im});
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      return std::string(e.what());
    }
    ADD_FAILURE() << "encoded";
    return std::string();
  };
  const auto p12 = pixels_of(12, 48, 1), p140 = pixels_of(140, 48, 1);
  EXPECT_NE(error({3, 4, p12}).find("multiples of the pooling kernel"), std::string::npos);
  EXPECT_NE(error({2, 70, p140}).find("position table"), std::string::npos);
  EXPECT_NE(error({2, 4, p12}).find("pixel values"), std::string::npos);
  EXPECT_NE(error({0, 0, {}}).find("multiples"), std::string::npos);
}

TEST(VisionTower, PixelInputIsTwiceTheRescaledValueMinusOne) {
  EXPECT_EQ(bf16_to_f32(VisionTower::pixel_input(0)), -1.0f);
  EXPECT_EQ(bf16_to_f32(VisionTower::pixel_input(255)), 1.0f);
  for (int v = 0; v < 256; ++v) {
    const float x = static_cast<float>(v) * static_cast<float>(1.0 / 255.0);
    EXPECT_EQ(VisionTower::pixel_input(static_cast<uint8_t>(v)), f32_to_bf16(2.0f * (x - 0.5f)));
    EXPECT_NEAR(bf16_to_f32(VisionTower::pixel_input(static_cast<uint8_t>(v))), v / 127.5 - 1.0, 4e-3);
  }
}

}  // namespace
}  // namespace dgemma
