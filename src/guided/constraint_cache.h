#pragma once
// Compiled constraints shared across requests: key (canonical constraint, limits, vocabulary) ->
// TokenConstraint, least recently used first out when the cache holds more than max_entries
// constraints or max_bytes of them. Thread-safe; compilation runs outside the lock (two requests
// compiling one new constraint at once both compile it, and the first result is kept). Failures are not
// cached.
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "guided/guided.h"

namespace dgemma::guided {

class ConstraintCache {
 public:
  ConstraintCache(size_t max_entries, size_t max_bytes, CompileLimits limits = {});

  // The compiled constraint for `vocab`, from the cache or compiled now (throws as
  // compile_for_vocabulary does).
  std::shared_ptr<const TokenConstraint> get(const ConstraintSpec& spec,
                                             const std::shared_ptr<const TokenVocabulary>& vocab);

  struct Stats {
    size_t entries = 0;
    size_t bytes = 0;
    uint64_t hits = 0;
    uint64_t misses = 0;
  };
  Stats stats() const;
  const CompileLimits& limits() const { return limits_; }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const TokenConstraint> value;
    size_t bytes;
  };
  void evict_locked();

  const size_t max_entries_, max_bytes_;
  const CompileLimits limits_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // front: most recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  Stats stats_;
};

}  // namespace dgemma::guided
