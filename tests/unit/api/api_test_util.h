#pragma once
// Shared by the api unit tests: the Gemma 4 tokenizer the build generates, and a DiffusionGemma chat
// template (the embedded model's, in the July format).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace dgemma::api_test {

inline std::string gemma4_tokenizer_path() {
  if (const char* env = std::getenv("DGEMMA_GEMMA4_TOKENIZER"); env && *env) return env;
  return std::string(DGEMMA_BINARY_DIR) + "/gemma4-tokenizer/tokenizer.json";
}

// Loaded once per binary; nullptr when the build has not produced it (the tests then fail, loudly).
inline const Tokenizer* gemma4() {
  static std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    if (!std::filesystem::exists(gemma4_tokenizer_path())) return nullptr;
    return Tokenizer::from_file(gemma4_tokenizer_path());
  }();
  return tok.get();
}

inline ChatTemplate diffusiongemma_template() {
  return ChatTemplate::from_model_dir(std::string(DGEMMA_SOURCE_DIR) + "/models/tiny-code");
}

}  // namespace dgemma::api_test

#define DG_API_TOKENIZER(tok)                                     \
  const ::dgemma::Tokenizer* tok = ::dgemma::api_test::gemma4();  \
  ASSERT_NE(tok, nullptr) << "Gemma 4 tokenizer missing at " << ::dgemma::api_test::gemma4_tokenizer_path()
