#include "guided/constraint_cache.h"

namespace dgemma::guided {

ConstraintCache::ConstraintCache(size_t max_entries, size_t max_bytes, CompileLimits limits)
    : max_entries_(max_entries), max_bytes_(max_bytes), limits_(limits) {}

std::shared_ptr<const TokenConstraint> ConstraintCache::get(
    const ConstraintSpec& spec, const std::shared_ptr<const TokenVocabulary>& vocab) {
  const std::string key = constraint_key(spec, limits_) + "|vocabulary " + std::to_string(vocab->serial());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      ++stats_.hits;
      return it->second->value;
    }
    ++stats_.misses;
  }
  std::shared_ptr<const TokenConstraint> compiled = compile_for_vocabulary(spec, vocab, limits_);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->value;  // compiled meanwhile
  const size_t bytes = compiled->memory_bytes();
  lru_.push_front(Entry{key, compiled, bytes});
  index_.emplace(key, lru_.begin());
  stats_.bytes += bytes;
  evict_locked();
  return compiled;
}

void ConstraintCache::evict_locked() {
  while (!lru_.empty() && (lru_.size() > max_entries_ || stats_.bytes > max_bytes_)) {
    stats_.bytes -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

ConstraintCache::Stats ConstraintCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.entries = lru_.size();
  return s;
}

}  // namespace dgemma::guided
