#pragma once
// dgemma generate MODEL --chat: an interactive terminal chat through the public engine interface.
#include <cstdint>
#include <optional>
#include <string>

namespace dgemma::cli {

struct ChatOptions {
  std::string model;
  std::string load_format = "auto";
  std::string device = "auto";
  int64_t max_tokens = 256;  // per answer
  uint64_t seed = 0;         // answer k uses seed + k
  bool thinking = false;
  std::optional<int> max_denoising_steps;
  std::optional<double> entropy_bound;
};

// Reads user lines from stdin until EOF; answers each with the whole conversation as context. On a
// terminal the canvas being denoised is redrawn in place, step by step; otherwise the committed text
// is printed as it comes. Per-canvas statistics follow each answer.
int run_generate_chat(const ChatOptions& options);

}  // namespace dgemma::cli
