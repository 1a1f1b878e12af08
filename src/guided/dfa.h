#pragma once
// Deterministic automata over bytes, in the flat form the token walk reads (and a kernel can read):
// bytes map to equivalence classes (byte_class), and next[state * num_classes + class] is the next
// state or kDead. Every state of a Dfa made here is reachable and live (some accepting state is
// reachable from it), and the automaton is minimal with the fewest classes.
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "guided/limits.h"

namespace dgemma::guided {

struct Nfa;

inline constexpr int32_t kDead = -1;

struct Dfa {
  int32_t num_states = 0;  // 0: the empty language (start is then kDead)
  int32_t num_classes = 1;
  int32_t start = kDead;
  std::array<uint8_t, 256> byte_class{};
  std::vector<int32_t> next;       // [num_states * num_classes]
  std::vector<uint8_t> accepting;  // [num_states]

  int32_t step(int32_t state, uint8_t byte) const {
    return next[static_cast<size_t>(state) * static_cast<size_t>(num_classes) + byte_class[byte]];
  }
  bool empty_language() const { return num_states == 0; }
};

// Subset construction, then minimisation. Throws Error(kInvalidArgument) past limits.max_dfa_states
// or limits.max_work.
Dfa determinize(const Nfa& nfa, const CompileLimits& limits);

// The minimal equivalent automaton: states that cannot reach acceptance removed (kDead), unreachable
// ones dropped, equivalent ones merged (Hopcroft), equal byte columns merged into one class, states
// numbered in breadth-first order from the start. Accepts a Dfa whose states need not be live.
Dfa minimize(const Dfa& dfa);

bool accepts(const Dfa& dfa, std::string_view text);

// The state after `text` from `state` (kDead once it leaves the automaton).
int32_t walk_bytes(const Dfa& dfa, int32_t state, std::string_view text);

// How the states of several automata combine in a product.
enum class ProductRule { kAll, kExactlyOne };

// The product automaton of `parts` (all over bytes): accepts a string when all parts accept it
// (kAll, intersection) or exactly one does (kExactlyOne, JSON Schema oneOf). Throws past the limits.
Dfa product(const std::vector<const Dfa*>& parts, ProductRule rule, const CompileLimits& limits);

}  // namespace dgemma::guided
