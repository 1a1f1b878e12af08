#include "engine/guided_tables.h"

#include "guided/token_constraint.h"

namespace dgemma {
namespace {

template <typename T>
Tensor upload_array(Backend& be, const T* data, size_t n, ScalarType type) {
  return be.upload(borrow_tensor(const_cast<T*>(data), type, {static_cast<int64_t>(n)}));
}

}  // namespace

const GuidedTables& GuidedTableCache::get(Backend& be,
                                          const std::shared_ptr<const guided::TokenConstraint>& c) {
  if (auto it = index_.find(c.get()); it != index_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    lru_.front().used = step_;
    return lru_.front().tables;
  }
  const guided::TokenVocabulary& vocab = c->vocabulary();
  auto vt = vocabularies_.find(vocab.serial());
  if (vt == vocabularies_.end()) {
    VocabularyTables t;
    t.token_offsets = upload_array(be, vocab.offsets().data(), vocab.offsets().size(), ScalarType::kI32);
    // A vocabulary of empty pieces still gets a one-byte table (an empty tensor has no address).
    static const uint8_t kNone[1] = {0};
    t.token_bytes = vocab.data().empty()
                        ? upload_array(be, kNone, 1, ScalarType::kU8)
                        : upload_array(be, vocab.data().data(), vocab.data().size(), ScalarType::kU8);
    t.token_kind = upload_array(be, vocab.kinds().data(), vocab.kinds().size(), ScalarType::kU8);
    vt = vocabularies_.emplace(vocab.serial(), std::move(t)).first;
  }
  const guided::Dfa& d = c->dfa();
  Entry e;
  e.constraint = c;
  e.used = step_;
  GuidedTables& t = e.tables;
  t.num_states = d.num_states;
  t.num_classes = d.num_classes;
  t.vocab_size = vocab.size();
  t.byte_class = upload_array(be, d.byte_class.data(), d.byte_class.size(), ScalarType::kU8);
  t.next = upload_array(be, d.next.data(), d.next.size(), ScalarType::kI32);
  t.accepting = upload_array(be, d.accepting.data(), d.accepting.size(), ScalarType::kU8);
  t.distance = upload_array(be, c->distances().data(), c->distances().size(), ScalarType::kI32);
  t.gap_mask = upload_array(be, c->gap_mask().data(), c->gap_mask().size(), ScalarType::kI32);
  t.token_offsets = vt->second.token_offsets;
  t.token_bytes = vt->second.token_bytes;
  t.token_kind = vt->second.token_kind;
  lru_.push_front(std::move(e));
  index_[c.get()] = lru_.begin();
  while (lru_.size() > kMaxConstraints && lru_.back().used != step_) {
    index_.erase(lru_.back().constraint.get());
    lru_.pop_back();
  }
  return lru_.front().tables;
}

}  // namespace dgemma
