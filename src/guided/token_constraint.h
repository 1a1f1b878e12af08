#pragma once
// A compiled constraint lifted to one vocabulary's token ids: what the sampler and the decide step
// need, in flat arrays (token_walk.h is the walk over them).
//
// Masks are bitsets over the vocabulary, 32 ids per word, bit (id & 31) of word id / 32, 1 = allowed:
//  - gap_mask(): the tokens that can occur anywhere in a value of the gap: a text token is allowed when
//    from some state of the automaton its bytes lead to a live state (exactly the union of all state
//    masks). It is computed over a trie of the vocabulary's byte-class sequences, carrying the set of
//    states a prefix can reach; past CompileLimits::max_mask_work that walk stops and the mask is the
//    byte-class approximation instead (a token is allowed when each of its bytes has a live move from
//    some state), a superset. gap_mask_exact() tells which one was made. Fillers are always allowed.
//  - state_mask(state): the tokens allowed right after a prefix that ended in `state` (exact), fillers
//    included: the mask of the first position after a gap's accepted prefix.
// Completion: the shortest byte string from a state to acceptance (ties broken by the lowest byte at
// each step), and its tokens: the tokenizer's encoding when that spells exactly those bytes, otherwise
// the fewest vocabulary pieces that spell them.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "guided/dfa.h"
#include "guided/limits.h"
#include "guided/token_vocabulary.h"
#include "guided/token_walk.h"

namespace dgemma::guided {

class TokenConstraint {
 public:
  static std::shared_ptr<const TokenConstraint> build(std::shared_ptr<const Dfa> dfa,
                                                      std::shared_ptr<const TokenVocabulary> vocab,
                                                      const CompileLimits& limits);

  const Dfa& dfa() const { return *dfa_; }
  const TokenVocabulary& vocabulary() const { return *vocab_; }
  TokenConstraintView view() const;

  int32_t start() const { return dfa_->start; }
  bool accepting(int32_t state) const {
    return state >= 0 && dfa_->accepting[static_cast<size_t>(state)] != 0;
  }
  static bool dead(int32_t state) { return state < 0; }
  int32_t step(int32_t state, int32_t token) const { return step_token(view(), state, token); }
  WalkResult walk(int32_t state, std::span<const int32_t> tokens) const;

  int32_t mask_words() const { return (vocab_->size() + 31) / 32; }
  const std::vector<uint32_t>& gap_mask() const { return gap_mask_; }
  bool gap_mask_exact() const { return gap_mask_exact_; }
  std::vector<uint32_t> state_mask(int32_t state) const;

  int32_t completion_length(int32_t state) const { return distance_[static_cast<size_t>(state)]; }  // bytes
  const std::vector<int32_t>& distances() const { return distance_; }  // [states] completion_length
  std::string completion_bytes(int32_t state) const;
  // nullopt when the vocabulary cannot spell the completion (no piece for some byte).
  std::optional<std::vector<int32_t>> completion_tokens(int32_t state) const;

  size_t memory_bytes() const;

 private:
  TokenConstraint() = default;
  void build_trie();
  void build_gap_mask(int64_t max_work);
  void build_completions();

  std::shared_ptr<const Dfa> dfa_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  // The vocabulary's text tokens as a trie of byte-class sequences, nodes in preorder (node 0: root).
  struct TrieNode {
    int32_t end;          // one past the last node of this subtree
    int32_t token_begin;  // tokens ending here: sorted_tokens_[token_begin, token_end)
    int32_t token_end;
    uint16_t depth;
    uint8_t cls;
  };
  std::vector<TrieNode> trie_;
  std::vector<int32_t> sorted_tokens_;
  std::vector<uint32_t> filler_mask_;
  std::vector<uint32_t> gap_mask_;
  bool gap_mask_exact_ = true;
  std::vector<int32_t> distance_;   // [states] bytes to acceptance
  std::vector<uint8_t> next_byte_;  // [states] first byte of the shortest completion
};

}  // namespace dgemma::guided
