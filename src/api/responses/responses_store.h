#pragma once
// The responses a server keeps for `previous_response_id` and GET /v1/responses/{id}: in memory, for
// the server's lifetime, bounded by a count and a byte budget; the least recently used go first.
// Thread-safe.
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "util/json.h"

namespace dgemma {

class ResponsesStore {
 public:
  static constexpr size_t kDefaultMaxEntries = 1024;
  static constexpr size_t kDefaultMaxBytes = size_t{64} << 20;

  explicit ResponsesStore(size_t max_entries = kDefaultMaxEntries, size_t max_bytes = kDefaultMaxBytes);

  // Keeps a finished response and the conversation (chat messages) a later request continues. A
  // response larger than the whole budget is not kept (returns false).
  bool put(const std::string& id, Json response, Json conversation);
  // Looking an entry up makes it the most recently used.
  std::optional<Json> response(const std::string& id);
  std::optional<Json> conversation(const std::string& id);
  bool erase(const std::string& id);

  size_t size() const;
  size_t bytes() const;

 private:
  struct Entry {
    std::string id;
    Json response, conversation;
    size_t bytes = 0;
  };
  Entry* touch(const std::string& id);  // under mu_
  void drop_oldest();                   // under mu_

  size_t max_entries_, max_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace dgemma
