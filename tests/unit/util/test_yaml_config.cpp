// The YAML subset of configuration files (vLLM's `serve --config`): what such files hold parses to the
// JSON PyYAML's safe_load gives, and everything outside the subset is an error naming the line.
#include <gtest/gtest.h>

#include <string>

#include "util/error.h"
#include "util/yaml_config.h"

namespace dgemma {
namespace {

Json yaml(const std::string& text) {
  return parse_yaml_config(text, "cfg.yaml");
}

std::string error_of(const std::string& text) {
  try {
    parse_yaml_config(text, "cfg.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(YamlConfig, FlatScalarsTypedAsPyYaml) {
  const Json j = yaml(
      "# vLLM serve config\n"
      "---\n"
      "model: google/diffusiongemma-26B-A4B-it\n"
      "host: \"127.0.0.1\"\n"
      "port: 6379   # a comment\n"
      "gpu-memory-utilization: 0.85\n"
      "uvicorn-log-level: 'info'\n"
      "enforce-eager: true\n"
      "trust_remote_code: Yes\n"
      "enable-prefix-caching: off\n"
      "seed: -1\n"
      "nothing:\n"
      "tilde: ~\n"
      "plain: 1e3\n"
      "url: http://host:80/a#b\n"
      "hash: 'a # not a comment'\n"
      "escaped: \"tab\\there \\u00e9\"\n"
      "quote: 'it''s'\n");
  EXPECT_EQ(j["model"], "google/diffusiongemma-26B-A4B-it");
  EXPECT_EQ(j["host"], "127.0.0.1");
  EXPECT_EQ(j["port"], 6379);
  EXPECT_DOUBLE_EQ(j["gpu-memory-utilization"].get<double>(), 0.85);
  EXPECT_EQ(j["uvicorn-log-level"], "info");
  EXPECT_EQ(j["enforce-eager"], true);
  EXPECT_EQ(j["trust_remote_code"], true);
  EXPECT_EQ(j["enable-prefix-caching"], false);
  EXPECT_EQ(j["seed"], -1);
  EXPECT_TRUE(j["nothing"].is_null());
  EXPECT_TRUE(j["tilde"].is_null());
  EXPECT_EQ(j["plain"], "1e3");  // YAML 1.1 floats need a dot
  EXPECT_EQ(j["url"], "http://host:80/a#b");
  EXPECT_EQ(j["hash"], "a # not a comment");
  EXPECT_EQ(j["escaped"], "tab\there \xC3\xA9");
  EXPECT_EQ(j["quote"], "it's");
}

TEST(YamlConfig, ListsAndMappings) {
  const Json j = yaml(
      "served-model-name:\n"
      "  - a\n"
      "  - \"b\"\n"
      "api-key:\n"
      "- k1\n"
      "- k2\n"
      "allowed-origins: [\"http://x\", http://y]\n"
      "hf-overrides: {\"diffusion_sampler\": \"entropy_bound\", diffusion_entropy_bound: 0.1}\n"
      "compilation-config:\n"
      "  level: 3\n"
      "  cudagraph_capture_sizes: [1, 2,\n"
      "    4, 8]\n"
      "  nested:\n"
      "    deep: true\n"
      "items:\n"
      "  - name: x\n"
      "    size: 1\n"
      "  - name: y\n"
      "empty-list: []\n"
      "empty-map: {}\n");
  EXPECT_EQ(j["served-model-name"], Json::parse(R"(["a", "b"])"));
  EXPECT_EQ(j["api-key"], Json::parse(R"(["k1", "k2"])"));
  EXPECT_EQ(j["allowed-origins"], Json::parse(R"(["http://x", "http://y"])"));
  EXPECT_EQ(j["hf-overrides"],
            Json::parse(R"({"diffusion_sampler": "entropy_bound", "diffusion_entropy_bound": 0.1})"));
  EXPECT_EQ(
      j["compilation-config"],
      Json::parse(R"({"level": 3, "cudagraph_capture_sizes": [1, 2, 4, 8], "nested": {"deep": true}})"));
  EXPECT_EQ(j["items"], Json::parse(R"([{"name": "x", "size": 1}, {"name": "y"}])"));
  EXPECT_EQ(j["empty-list"], Json::array());
  EXPECT_EQ(j["empty-map"], Json::object());
}

TEST(YamlConfig, BlockScalars) {
  const Json j = yaml(
      "chat-template: |\n"
      "  {{ bos_token }}\n"
      "    indented\n"
      "\n"
      "  end\n"
      "folded: >-\n"
      "  one\n"
      "  two\n"
      "\n"
      "  three\n"
      "after: 1\n");
  EXPECT_EQ(j["chat-template"], "{{ bos_token }}\n  indented\n\nend\n");
  EXPECT_EQ(j["folded"], "one two\nthree");
  EXPECT_EQ(j["after"], 1);
}

TEST(YamlConfig, EmptyFileIsAnEmptyMapping) {
  EXPECT_EQ(yaml(""), Json::object());
  EXPECT_EQ(yaml("# only a comment\n\n"), Json::object());
}

TEST(YamlConfig, ErrorsNameTheLine) {
  EXPECT_EQ(error_of("a: 1\na: 2\n"), "cfg.yaml line 2: the key 'a' appears twice");
  EXPECT_EQ(error_of("a: [1, 2\n"), "cfg.yaml line 1: an unterminated [ or {");
  EXPECT_EQ(error_of("- a\n"), "cfg.yaml line 1: the top level must be a mapping of flag: value");
  EXPECT_EQ(error_of("a: 1\n  b: 2\n"), "cfg.yaml line 2: unexpected indentation");
  EXPECT_EQ(error_of("a: &x 1\n"), "cfg.yaml line 1: anchors, aliases and tags are not supported");
  EXPECT_EQ(error_of("a: !!str 1\n"), "cfg.yaml line 1: anchors, aliases and tags are not supported");
  EXPECT_EQ(error_of("a: 1\n---\nb: 2\n"), "cfg.yaml line 2: only one YAML document is supported");
  EXPECT_EQ(error_of("a: \"open\n"), "cfg.yaml line 1: an unterminated quoted string");
  EXPECT_EQ(error_of("a: b: c\n"), "cfg.yaml line 1: a mapping must start on its own line");
  EXPECT_EQ(error_of("just text\n"), "cfg.yaml line 1: expected 'key: value'");
  EXPECT_EQ(error_of("\ta: 1\n"), "cfg.yaml line 1: a tab in the indentation (use spaces)");
  EXPECT_EQ(error_of("a: {b: 1, b: 2}\n"), "cfg.yaml line 1: the key 'b' appears twice");
  EXPECT_EQ(error_of("a: \"\\q\"\n"), "cfg.yaml line 1: an unknown escape \\q");
  std::string deep = "a: ";
  for (int i = 0; i < 100; ++i) deep += "[";
  EXPECT_EQ(error_of(deep + "\n").rfind("cfg.yaml line 1: ", 0), 0u);
}

}  // namespace
}  // namespace dgemma
