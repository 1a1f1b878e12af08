#pragma once
// The bounds every compilation runs under (src/guided/guided.h): a constraint that would need more
// fails with Error(kInvalidArgument) saying which bound it hit, in time proportional to the bound, so a
// hostile pattern or schema can never hang the server or take unbounded memory.
#include <cstddef>
#include <cstdint>
#include <string>

namespace dgemma::guided {

struct CompileLimits {
  size_t max_source_bytes = 64 * 1024;  // a regex, a schema's text, or all choices together
  int max_nesting = 64;                 // regex groups, schema nesting, $ref chains
  int max_repeat = 1000;                // the largest bound in {m,n}, minLength / maxLength, min/maxItems
  int max_choices = 4096;               // strings of a choice constraint
  size_t max_ast_nodes = 1 << 20;       // syntax tree nodes after $ref / format expansion
  int32_t max_nfa_states = 1 << 20;     // Thompson NFA states
  int32_t max_dfa_states = 1 << 15;     // DFA states during subset construction and products
  int64_t max_work = 200'000'000;       // elementary steps of one subset construction or product
  int any_value_depth = 3;              // nesting of an unconstrained JSON value ({} / items absent)
  int json_object_depth = 5;            // nesting of a json_object constraint's object
  int64_t max_mask_work = 400'000'000;  // the exact gap mask's trie walk; past it the byte-set mask
};

// A stable text of the fields, part of the cache key: two compilations under different limits may differ.
std::string limits_key(const CompileLimits& limits);

}  // namespace dgemma::guided
