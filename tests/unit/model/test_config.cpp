// config.json / generation_config.json parsing: both config styles, the reference's defaults, and a
// clear error for every out-of-range or inconsistent value.
#include <gtest/gtest.h>

#include "../reference_data.h"
#include "model/config.h"
#include "util/error.h"
#include "util/mmap_file.h"

namespace dgemma {
namespace {

using testing::reference_path;

const std::string kRealConfig = reference_path("configs/diffusiongemma-26b-a4b/config.json");
const std::string kRealGenerationConfig =
    reference_path("configs/diffusiongemma-26b-a4b/generation_config.json");

Json real_config() {
  return parse_json(read_text_file(kRealConfig), kRealConfig, true);
}

TEST(Config, ReleasedCheckpointShape) {
  DG_NEED_REFERENCE(kRealConfig);
  const ModelConfig c = parse_model_config(real_config(), "config.json");
  const TextConfig& t = c.text;
  EXPECT_EQ(c.canvas_length, 256);
  EXPECT_EQ(t.vocab_size, 262144);
  EXPECT_EQ(t.hidden_size, 2816);
  EXPECT_EQ(t.num_hidden_layers, 30);
  EXPECT_EQ(t.self_conditioning_size, 2112) << "falls back to intermediate_size";
  int full = 0;
  for (int i = 0; i < 30; ++i) {
    const LayerSpec& L = t.layers[i];
    const bool is_full = i % 6 == 5;
    EXPECT_EQ(L.type == LayerType::kFull, is_full) << i;
    EXPECT_EQ(L.head_dim, is_full ? 512 : 256) << i;
    EXPECT_EQ(L.num_kv_heads, is_full ? 2 : 8) << i;
    EXPECT_EQ(L.k_eq_v, is_full) << i;
    full += is_full;
  }
  EXPECT_EQ(full, 5);
  EXPECT_EQ(t.rope_full.type, RopeType::kProportional);
  EXPECT_DOUBLE_EQ(t.rope_full.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(t.rope_full.theta, 1e6);
  EXPECT_EQ(t.sliding_window, 1024);
}

TEST(Config, PerLayerConfigStyleEqualsGlobalKeys) {
  DG_NEED_REFERENCE(kRealConfig);
  Json j = real_config();
  Json& t = j["text_config"];
  t.erase("global_head_dim");
  t.erase("num_global_key_value_heads");
  t["per_layer_config"] = Json::object();
  for (int i : {5, 11, 17, 23, 29}) t["per_layer_config"][std::to_string(i)] = Json{{"head_dim", 512}, {"num_key_value_heads", 2}};
  const ModelConfig a = parse_model_config(real_config(), "old");
  const ModelConfig b = parse_model_config(j, "new");
  for (int i = 0; i < 30; ++i) {
    EXPECT_EQ(a.text.layers[i].head_dim, b.text.layers[i].head_dim);
    EXPECT_EQ(a.text.layers[i].num_kv_heads, b.text.layers[i].num_kv_heads);
  }
}

TEST(Config, DefaultLayerPatternWhenAbsent) {
  DG_NEED_REFERENCE(kRealConfig);
  Json j = real_config();
  j["text_config"].erase("layer_types");
  const ModelConfig c = parse_model_config(j, "x");
  EXPECT_EQ(c.text.layers[5].type, LayerType::kFull);
  EXPECT_EQ(c.text.layers[4].type, LayerType::kSliding);
  EXPECT_EQ(c.text.layers[29].type, LayerType::kFull);
}

void expect_bad(Json j, const std::string& needle) {
  try {
    parse_model_config(j, "bad/config.json");
    ADD_FAILURE() << "accepted a config that should fail with: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidFile);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad/config.json"), std::string::npos) << "names the file: " << e.what();
  }
}

TEST(Config, RejectsBadValuesClearly) {
  DG_NEED_REFERENCE(kRealConfig);
  Json j = real_config();
  j["model_type"] = "llama";
  expect_bad(j, "model_type");
  j = real_config();
  j["text_config"]["num_attention_heads"] = 12;  // not a multiple of 8 KV heads
  expect_bad(j, "num_attention_heads");
  j = real_config();
  j["text_config"]["sliding_window"] = 1;
  expect_bad(j, "sliding_window");
  j = real_config();
  j["canvas_length"] = 0;
  expect_bad(j, "canvas_length");
  j = real_config();
  j["text_config"]["eos_token_id"] = 300000;  // outside the vocabulary
  expect_bad(j, "eos_token_id");
  j = real_config();
  j["text_config"]["pad_token_id"] = -1;
  expect_bad(j, "pad_token_id");
  j = real_config();
  j["text_config"]["top_k_experts"] = 200;
  expect_bad(j, "top_k_experts");
  j = real_config();
  j["text_config"]["layer_types"] = Json::array({"sliding_attention"});
  expect_bad(j, "layer_types");
  j = real_config();
  j["text_config"]["hidden_size"] = "big";
  expect_bad(j, "hidden_size");
  j = real_config();
  j["text_config"]["rope_parameters"]["full_attention"]["rope_type"] = "yarn";
  expect_bad(j, "rope_type");
  j = real_config();
  j["text_config"]["use_bidirectional_attention"] = "all";
  expect_bad(j, "use_bidirectional_attention");
  j = real_config();
  j["text_config"]["per_layer_config"] = Json{{"99", Json{{"head_dim", 512}}}};
  expect_bad(j, "per_layer_config");
  j = real_config();
  j["text_config"]["head_dim"] = 255;
  expect_bad(j, "head_dim");
  j = real_config();
  j.erase("text_config");
  expect_bad(j, "text_config");
}

TEST(GenerationConfig, ReleasedValuesAndDefaults) {
  DG_NEED_REFERENCE(kRealGenerationConfig);
  const std::string& path = kRealGenerationConfig;
  const GenerationConfig g = parse_generation_config(parse_json(read_text_file(path), path, true), path);
  EXPECT_EQ(g.max_denoising_steps, 48);
  EXPECT_DOUBLE_EQ(g.entropy_bound, 0.1);
  EXPECT_DOUBLE_EQ(g.t_min, 0.4);
  EXPECT_DOUBLE_EQ(g.t_max, 0.8);
  EXPECT_EQ(g.stability_threshold, 1);
  EXPECT_DOUBLE_EQ(g.confidence_threshold, 0.005);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int32_t>{1, 106, 50}));
  const GenerationConfig d = parse_generation_config(Json::object(), "empty");
  EXPECT_EQ(d.max_denoising_steps, 48);
  EXPECT_DOUBLE_EQ(d.entropy_bound, 0.1);
}

TEST(GenerationConfig, RejectsWhatTheReferenceRejects) {
  auto bad = [](Json j, const std::string& needle) {
    try {
      parse_generation_config(j, "gen.json");
      ADD_FAILURE() << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  bad(Json{{"sampler_config", Json{{"_cls_name", "DiscreteDDIMSamplerConfig"}}}}, "EntropyBound");
  bad(Json{{"t_min", 0.8}, {"t_max", 0.4}}, "t_max");
  bad(Json{{"t_min", 0.5}, {"t_max", 0.5}}, "t_max");
  bad(Json{{"max_denoising_steps", 0}}, "max_denoising_steps");
  bad(Json{{"confidence_threshold", 0}}, "confidence_threshold");
  bad(Json{{"sampler_config", Json{{"entropy_bound", 0.0}}}}, "entropy_bound");
  bad(Json{{"temperature", 0.7}}, "temperature");
  bad(Json{{"stability_threshold", -1}}, "stability_threshold");
}

}  // namespace
}  // namespace dgemma
