#pragma once
// Shared by the guided-decoding tests: compiling constraints, walking and sampling automata, the
// tokenizers the tests lift to.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "guided/dfa.h"
#include "guided/guided.h"
#include "guided/json_schema.h"
#include "text/tokenizer/tokenizer.h"

namespace dgemma::guided::test {

inline Dfa regex_dfa(const std::string& pattern, const CompileLimits& limits = {}) {
  return compile_constraint(ConstraintSpec::regex(pattern), limits);
}

inline Dfa schema_dfa(const std::string& schema, const CompileLimits& limits = {}) {
  return compile_constraint(ConstraintSpec::json_schema(schema), limits);
}

// Whether some accepted text starts with `prefix`.
inline bool viable(const Dfa& dfa, std::string_view prefix) {
  return !dfa.empty_language() && walk_bytes(dfa, dfa.start, prefix) != kDead;
}

// A random accepted text: a walk over live moves that stops at an accepting state with probability
// `stop`, and past `soft_max` bytes heads for acceptance by the shortest path.
inline std::string sample(const Dfa& dfa, std::mt19937_64& rng, double stop = 0.15, size_t soft_max = 160) {
  std::string out;
  int32_t s = dfa.start;
  // Distances to acceptance (reverse breadth-first search), for the way out.
  std::vector<std::vector<int32_t>> preds(static_cast<size_t>(dfa.num_states));
  for (int32_t q = 0; q < dfa.num_states; ++q)
    for (int b = 0; b < 256; ++b)
      if (const int32_t t = dfa.step(q, static_cast<uint8_t>(b)); t >= 0)
        preds[static_cast<size_t>(t)].push_back(q);
  std::vector<int32_t> dist(static_cast<size_t>(dfa.num_states), -1), queue;
  for (int32_t q = 0; q < dfa.num_states; ++q)
    if (dfa.accepting[static_cast<size_t>(q)]) dist[static_cast<size_t>(q)] = 0, queue.push_back(q);
  for (size_t i = 0; i < queue.size(); ++i)
    for (int32_t p : preds[static_cast<size_t>(queue[i])])
      if (dist[static_cast<size_t>(p)] < 0)
        dist[static_cast<size_t>(p)] = dist[static_cast<size_t>(queue[i])] + 1, queue.push_back(p);
  while (true) {
    if (dfa.accepting[static_cast<size_t>(s)] &&
        (out.size() >= soft_max || std::uniform_real_distribution<double>(0, 1)(rng) < stop))
      return out;
    std::vector<int> moves;
    for (int b = 0; b < 256; ++b) {
      const int32_t t = dfa.step(s, static_cast<uint8_t>(b));
      if (t < 0) continue;
      if (out.size() >= soft_max && dist[static_cast<size_t>(t)] >= dist[static_cast<size_t>(s)]) continue;
      moves.push_back(b);
    }
    if (moves.empty()) return out;  // accepting with no way on
    const int b = moves[std::uniform_int_distribution<size_t>(0, moves.size() - 1)(rng)];
    out += static_cast<char>(b);
    s = dfa.step(s, static_cast<uint8_t>(b));
  }
}

inline std::string source_path(const std::string& rel) {
  return std::string(DGEMMA_SOURCE_DIR) + "/" + rel;
}

// The shipped tiny model's tokenizer (8,192 ids, byte fallback), loaded once.
inline const Tokenizer& tiny_tokenizer() {
  static std::unique_ptr<Tokenizer> tok =
      Tokenizer::from_file(source_path("models/tiny-code/tokenizer.json"));
  return *tok;
}

inline std::string gemma4_tokenizer_path() {
  if (const char* env = std::getenv("DGEMMA_GEMMA4_TOKENIZER"); env && *env) return env;
  return std::string(DGEMMA_BINARY_DIR) + "/gemma4-tokenizer/tokenizer.json";
}

// The Gemma 4 tokenizer the build generates; nullptr when absent (the tests then fail, loudly).
inline const Tokenizer* gemma4_tokenizer() {
  static std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    if (!std::filesystem::exists(gemma4_tokenizer_path())) return nullptr;
    return Tokenizer::from_file(gemma4_tokenizer_path());
  }();
  return tok.get();
}

// Pad and the end-of-sequence ids of the Gemma 4 family (docs/MODEL.md §7).
inline const std::vector<int32_t> kFillers = {0, 1, 50, 106};

}  // namespace dgemma::guided::test
