#pragma once
// The walk of a gap's tokens through its automaton, over flat arrays only, so that the CPU reference
// and a CUDA kernel run the same code (compile it with DGEMMA_GUIDED_HD defined as __host__ __device__).
//
// From `state`, tokens are taken left to right: a filler token is skipped (accepted, state unchanged);
// a text token's bytes step the automaton; the walk stops at the first token that is never allowed,
// out of the vocabulary, or leads to the dead state. The result is how many leading tokens were
// accepted (fillers included) and the state after them: the longest prefix that can still be completed
// to a value of the constraint.
#include <cstdint>

#ifndef DGEMMA_GUIDED_HD
#define DGEMMA_GUIDED_HD
#endif

namespace dgemma::guided {

struct TokenConstraintView {
  int32_t num_states;
  int32_t num_classes;
  int32_t start;
  const uint8_t* byte_class;  // [256]
  const int32_t* next;        // [num_states * num_classes], -1 = dead
  const uint8_t* accepting;   // [num_states]
  int32_t vocab_size;
  const int32_t* token_offsets;  // [vocab_size + 1]
  const uint8_t* token_bytes;
  const uint8_t* token_kind;  // TokenKind: 0 text, 1 filler, 2 never
};

struct WalkResult {
  int32_t accepted;  // leading tokens accepted
  int32_t state;     // the state after them (never dead)
};

// The state after token `token` from `state` (>= 0): unchanged for a filler, -1 when rejected.
DGEMMA_GUIDED_HD inline int32_t step_token(const TokenConstraintView& v, int32_t state, int32_t token) {
  if (token < 0 || token >= v.vocab_size) return -1;
  const uint8_t kind = v.token_kind[token];
  if (kind == 1) return state;
  if (kind != 0) return -1;
  for (int32_t i = v.token_offsets[token]; i < v.token_offsets[token + 1] && state >= 0; ++i)
    state = v.next[state * v.num_classes + v.byte_class[v.token_bytes[i]]];
  return state;
}

DGEMMA_GUIDED_HD inline WalkResult walk_tokens(const TokenConstraintView& v, int32_t state,
                                               const int32_t* tokens, int32_t count) {
  WalkResult r{0, state};
  for (int32_t i = 0; i < count; ++i) {
    const int32_t next = step_token(v, r.state, tokens[i]);
    if (next < 0) break;
    r.state = next;
    r.accepted = i + 1;
  }
  return r;
}

// walk_tokens with room: a text token is accepted only while the shortest completion of the state after
// it (distance[state], bytes) fits in the positions left after it, `room` being the positions from the
// first token on (a completion of b bytes takes at most b tokens when every byte has a piece). Fillers
// are not checked (a completion may take their positions), nor tokens with pinned[i] != 0 (`pinned`
// may be null): given text whose room the caller checked.
DGEMMA_GUIDED_HD inline WalkResult walk_tokens_within(const TokenConstraintView& v, const int32_t* distance,
                                                      int32_t state, const int32_t* tokens, int32_t count,
                                                      int64_t room, const uint8_t* pinned = nullptr) {
  WalkResult r{0, state};
  for (int32_t i = 0; i < count; ++i) {
    const int32_t next = step_token(v, r.state, tokens[i]);
    if (next < 0) break;  // rejected (an id outside the vocabulary included)
    const bool checked = v.token_kind[tokens[i]] != 1 && (pinned == nullptr || pinned[i] == 0);
    if (checked && distance[next] > room - (i + 1)) break;
    r.state = next;
    r.accepted = i + 1;
  }
  return r;
}

}  // namespace dgemma::guided
