#pragma once
// Guided decoding: constraints (a JSON Schema, any JSON object, a regex, a set of choices) compiled to
// byte automata and lifted to a vocabulary's token ids, for enforcement inside the denoising loop.
//
// Gaps. A constrained answer is a layout of pinned text and free gaps (src/api/openai/structured_output.h);
// each gap carries one constraint. Its value is the concatenation of the gap's text tokens, left to
// right, with filler ids (pad, end-of-sequence) skipped: a value shorter than its room ends early.
// Per denoising step, for each gap:
//   1. before sampling, the gap's positions take the gap mask (TokenConstraint::gap_mask: tokens that
//      can occur nowhere in a value are never sampled); the first position after the accepted prefix
//      may take the exact state mask (state_mask), which guarantees that position extends the prefix;
//   2. after sampling, the walk (token_walk.h) from the gap's start state over its tokens accepts the
//      longest prefix that can still be completed; the positions after it are re-noised;
//   3. at the last step, the positions after the accepted prefix become filler and the gap is closed
//      with the shortest completion from the prefix's state (TokenConstraint::completion_tokens).
// The walk reads flat arrays only (TokenConstraintView: a [states x classes] int32 table, 256 byte
// classes, the vocabulary's bytes), so the CPU reference and a CUDA kernel share it.
//
// JSON text form. A JSON constraint accepts values written as Python's json.dumps(value,
// ensure_ascii=False) writes them: ", " between members and elements, ": " after keys, no other white
// space; strings hold raw UTF-8 except '"', '\\' and U+0000..U+001F, which are escaped (\" \\ \b \f
// \n \r \t, other controls \u00xx in lower case), so a raw newline can never appear in a string;
// numbers follow the JSON grammar with at most 20 digits before the point and 2 in the exponent, so
// that every number parses to a finite double (-?(0|[1-9][0-9]{0,19})(.[0-9]+)?([eE][+-]?[0-9]{1,2})?;
// an integer has neither fraction nor exponent). Why this form: one text per value keeps the automata
// small, matches the pinned layouts' separators, and spends no gap room on white space (optional white
// space would let a value drift in its gap and multiply states by the indentation it tracks).
// Object members come in the schema's declaration order (properties, then required keys not declared
// there); optional ones may be left out. When a schema declares keys, the text form holds no others
// (additionalProperties only allows keys, it never requires them); with no declared keys,
// additionalProperties true / a schema allows any keys.
// Where the form is stricter than JSON Schema (every accepted text validates, but some valid values
// cannot be written): a pattern must match the whole string (JSON Schema searches); "1.0" is not an
// integer; enum / const values are written in their canonical text only; an unconstrained value ({},
// a missing items) nests at most CompileLimits::any_value_depth deep, a json_object constraint
// json_object_depth deep; a type implied by keywords alone (properties without "type") is that type
// only. oneOf is exact: a value matching two branches is rejected.
//
// Masks (token_constraint.h): the gap mask is exact for the gap as a whole (a token is allowed iff from
// some state its bytes stay live), computed once per constraint over a trie of the vocabulary's
// byte-class sequences (past CompileLimits::max_mask_work, a byte-class superset); a state mask is exact
// for one state. A kernel can make a state mask by running step_token (token_walk.h) over all ids.
//
// Regex constraints match the whole gap text (regex_parser.h gives the dialect); choices match one of
// the strings exactly (raw text, not JSON-quoted).
//
// Limits (limits.h): every stage is bounded (pattern / schema size and nesting, repetition counts,
// syntax tree nodes, NFA states, DFA states, subset-construction work); past a bound a constraint is
// Error(kInvalidArgument) saying which, in time proportional to the bound.
//
// Compiled constraints are cached per (canonical constraint, limits, vocabulary): ConstraintCache.
#include <memory>
#include <string>
#include <vector>

#include "guided/dfa.h"
#include "guided/limits.h"
#include "guided/token_constraint.h"
#include "guided/token_vocabulary.h"

namespace dgemma::guided {

// kToolCall: one tool call's text NAME{arguments}, NAME one of `choices` and the arguments a value of
// that function's parameter schema (`schemas`, same order; an empty text: no arguments, "{}").
enum class ConstraintKind { kJsonSchema, kJsonObject, kRegex, kChoice, kToolCall };

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;                  // kJsonSchema: the schema's JSON text; kRegex: the pattern
  std::vector<std::string> choices;  // kChoice; kToolCall: the function names
  std::vector<std::string> schemas;  // kToolCall: each function's parameter schema text

  static ConstraintSpec json_schema(std::string schema_text) {
    return {ConstraintKind::kJsonSchema, std::move(schema_text), {}, {}};
  }
  static ConstraintSpec json_object() { return {ConstraintKind::kJsonObject, {}, {}, {}}; }
  static ConstraintSpec regex(std::string pattern) {
    return {ConstraintKind::kRegex, std::move(pattern), {}, {}};
  }
  static ConstraintSpec choice(std::vector<std::string> choices) {
    return {ConstraintKind::kChoice, {}, std::move(choices), {}};
  }
  static ConstraintSpec tool_call(std::vector<std::string> names, std::vector<std::string> schemas) {
    return {ConstraintKind::kToolCall, {}, std::move(names), std::move(schemas)};
  }
};

// Checks a constraint without building its automaton: Error(kUnsupported) naming the keyword or
// construct outside the subset, Error(kInvalidArgument) for a malformed one. Cheap; for a 400 up front.
void check_constraint(const ConstraintSpec& spec, const CompileLimits& limits = {});

// The constraint's byte automaton. Throws as check_constraint does, and Error(kInvalidArgument) when
// no text satisfies it or a limit is exceeded.
Dfa compile_constraint(const ConstraintSpec& spec, const CompileLimits& limits = {});

// compile_constraint lifted to `vocab`.
std::shared_ptr<const TokenConstraint> compile_for_vocabulary(const ConstraintSpec& spec,
                                                              std::shared_ptr<const TokenVocabulary> vocab,
                                                              const CompileLimits& limits = {});

// The cache key of a constraint: its kind and canonical text (a schema re-serialised compactly with its
// member order kept, choices length-prefixed) and the limits.
std::string constraint_key(const ConstraintSpec& spec, const CompileLimits& limits);

}  // namespace dgemma::guided
