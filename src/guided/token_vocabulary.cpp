#include "guided/token_vocabulary.h"

#include <algorithm>
#include <atomic>
#include <unordered_set>

#include "text/tokenizer/tokenizer.h"
#include "util/error.h"

namespace dgemma::guided {
namespace {
std::atomic<uint64_t> next_serial{1};
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_tokenizer(const Tokenizer& tokenizer,
                                                                       std::span<const int32_t> filler_ids) {
  std::shared_ptr<TokenVocabulary> v(new TokenVocabulary());
  const int32_t n = tokenizer.vocab_size();
  const std::unordered_set<int32_t> fillers(filler_ids.begin(), filler_ids.end());
  for (int32_t id : fillers)
    if (id < 0 || id >= n) fail_arg("filler token id {} is outside the vocabulary [0, {})", id, n);
  v->kinds_.reserve(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    std::string bytes;
    TokenKind kind = TokenKind::kText;
    bool fallback = false;
    if (fillers.count(id)) {
      kind = TokenKind::kFiller;
    } else if (tokenizer.is_special(id)) {
      kind = TokenKind::kNever;
    } else if (const auto b = tokenizer.byte_value(id)) {
      bytes.assign(1, static_cast<char>(*b));
      fallback = true;
    } else {
      const int32_t one[] = {id};
      bytes = tokenizer.decode(one);
      if (bytes.empty()) kind = TokenKind::kNever;
    }
    v->data_.insert(v->data_.end(), bytes.begin(), bytes.end());
    v->offsets_.push_back(static_cast<int32_t>(v->data_.size()));
    v->kinds_.push_back(static_cast<uint8_t>(kind));
    v->byte_fallback_.push_back(fallback);
  }
  v->tokenizer_ = &tokenizer;
  v->finish();
  return v;
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_pieces(const std::vector<std::string>& bytes,
                                                                    const std::vector<TokenKind>& kinds) {
  DG_CHECK(bytes.size() == kinds.size());
  std::shared_ptr<TokenVocabulary> v(new TokenVocabulary());
  for (size_t id = 0; id < bytes.size(); ++id) {
    const bool text = kinds[id] == TokenKind::kText && !bytes[id].empty();
    if (text) v->data_.insert(v->data_.end(), bytes[id].begin(), bytes[id].end());
    v->offsets_.push_back(static_cast<int32_t>(v->data_.size()));
    v->kinds_.push_back(
        static_cast<uint8_t>(text || kinds[id] != TokenKind::kText ? kinds[id] : TokenKind::kNever));
    v->byte_fallback_.push_back(0);
  }
  v->finish();
  return v;
}

void TokenVocabulary::finish() {
  serial_ = next_serial++;
  by_bytes_.reserve(kinds_.size());
  // Ordinary pieces first, so that an exact match prefers them over byte-fallback pieces.
  for (int pass = 0; pass < 2; ++pass)
    for (int32_t id = 0; id < size(); ++id) {
      if (kind(id) != TokenKind::kText || byte_fallback(id) != (pass == 1)) continue;
      by_bytes_.emplace(bytes(id), id);
      max_token_bytes_ = std::max(max_token_bytes_, static_cast<int32_t>(bytes(id).size()));
    }
}

std::optional<int32_t> TokenVocabulary::find(std::string_view text) const {
  const auto it = by_bytes_.find(text);
  if (it == by_bytes_.end()) return std::nullopt;
  return it->second;
}

size_t TokenVocabulary::memory_bytes() const {
  return offsets_.size() * sizeof(int32_t) + data_.size() + kinds_.size() * 2 + by_bytes_.size() * 48;
}

}  // namespace dgemma::guided
