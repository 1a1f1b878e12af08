#pragma once
// The compiled constraints of guided decoding on the runner's backend (backend.h GuidedTables): the
// vocabulary's tables go to the device once per vocabulary, an automaton's tables and gap mask once
// per constraint, and stay there while recently used (at most kMaxConstraints constraints).
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>

#include "backend/backend.h"

namespace dgemma {

namespace guided {
class TokenConstraint;
}

class GuidedTableCache {
 public:
  static constexpr size_t kMaxConstraints = 64;

  // A new step: the tables asked for since the previous call stay valid through it.
  void begin_step() { ++step_; }
  // The device tables of `c`, valid through the current step (later ones may evict them once more than
  // kMaxConstraints are held).
  const GuidedTables& get(Backend& be, const std::shared_ptr<const guided::TokenConstraint>& c);

 private:
  struct VocabularyTables {
    Tensor token_offsets, token_bytes, token_kind;
  };
  struct Entry {
    std::shared_ptr<const guided::TokenConstraint> constraint;  // keeps the host arrays (and the key) alive
    GuidedTables tables;
    uint64_t used = 0;  // the step that last asked for it
  };
  uint64_t step_ = 0;
  std::unordered_map<uint64_t, VocabularyTables> vocabularies_;  // by TokenVocabulary::serial()
  std::list<Entry> lru_;                                         // front: most recently used
  std::unordered_map<const guided::TokenConstraint*, std::list<Entry>::iterator> index_;
};

}  // namespace dgemma
