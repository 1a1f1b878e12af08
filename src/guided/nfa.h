#pragma once
// Thompson construction: a syntax tree (regex_ast.h) to an NFA over bytes with epsilon moves. Every
// node use is expanded (a shared sub-tree gets its own states), bounded by CompileLimits::max_nfa_states.
#include <cstdint>
#include <vector>

#include "guided/regex_ast.h"

namespace dgemma::guided {

struct Nfa {
  struct Edge {
    uint8_t lo, hi;  // inclusive byte range
    int32_t to;
  };
  std::vector<std::vector<Edge>> edges;   // per state
  std::vector<std::vector<int32_t>> eps;  // per state
  int32_t start = 0;
  int32_t accept = 0;  // the one accepting state
  int32_t size() const { return static_cast<int32_t>(edges.size()); }
};

// Throws Error(kInvalidArgument) when the NFA would exceed limits.max_nfa_states.
Nfa build_nfa(const Ast& ast, NodeId root);

}  // namespace dgemma::guided
