#include "api/responses/responses_store.h"

#include "api/http/sse.h"

namespace dgemma {

ResponsesStore::ResponsesStore(size_t max_entries, size_t max_bytes)
    : max_entries_(max_entries), max_bytes_(max_bytes) {}

bool ResponsesStore::put(const std::string& id, Json response, Json conversation) {
  // The serialised size stands for the memory an entry holds.
  const size_t bytes = id.size() + json_text(response).size() + json_text(conversation).size();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  if (bytes > max_bytes_ || max_entries_ == 0) return false;
  while (!lru_.empty() && (lru_.size() + 1 > max_entries_ || bytes_ + bytes > max_bytes_)) drop_oldest();
  lru_.push_front(Entry{id, std::move(response), std::move(conversation), bytes});
  index_[id] = lru_.begin();
  bytes_ += bytes;
  return true;
}

void ResponsesStore::drop_oldest() {
  bytes_ -= lru_.back().bytes;
  index_.erase(lru_.back().id);
  lru_.pop_back();
}

ResponsesStore::Entry* ResponsesStore::touch(const std::string& id) {
  auto it = index_.find(id);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return &lru_.front();
}

std::optional<Json> ResponsesStore::response(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = touch(id);
  if (!e) return std::nullopt;
  return e->response;
}

std::optional<Json> ResponsesStore::conversation(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = touch(id);
  if (!e) return std::nullopt;
  return e->conversation;
}

bool ResponsesStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponsesStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

size_t ResponsesStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace dgemma
