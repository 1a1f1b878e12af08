#pragma once
// A tokenizer's vocabulary as the guided automata see it, built once per tokenizer: each id's bytes
// (the text it decodes to; a byte-fallback piece is its one byte) in one flat array, and its kind:
//   kText    ordinary text, walked byte by byte through a gap's automaton;
//   kFiller  the ids the engine drops from a gap (pad, end-of-sequence: the caller names them); the
//            walk skips them and every mask allows them, so a value shorter than its gap ends early;
//   kNever   special / control tokens, holes and empty pieces: never allowed inside a gap.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dgemma {
class Tokenizer;
}

namespace dgemma::guided {

enum class TokenKind : uint8_t { kText = 0, kFiller = 1, kNever = 2 };

class TokenVocabulary {
 public:
  // `tokenizer` must outlive the vocabulary (completions are encoded with it).
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(const Tokenizer& tokenizer,
                                                               std::span<const int32_t> filler_ids);
  // Explicit pieces (tests): bytes and kind per id; completions are matched greedily.
  static std::shared_ptr<const TokenVocabulary> from_pieces(const std::vector<std::string>& bytes,
                                                            const std::vector<TokenKind>& kinds);

  int32_t size() const { return static_cast<int32_t>(kinds_.size()); }
  std::string_view bytes(int32_t id) const {
    return {reinterpret_cast<const char*>(data_.data()) + offsets_[static_cast<size_t>(id)],
            static_cast<size_t>(offsets_[static_cast<size_t>(id) + 1] - offsets_[static_cast<size_t>(id)])};
  }
  TokenKind kind(int32_t id) const { return static_cast<TokenKind>(kinds_[static_cast<size_t>(id)]); }
  bool byte_fallback(int32_t id) const { return byte_fallback_[static_cast<size_t>(id)] != 0; }

  // The flat arrays (a kernel's view): offsets [size + 1] into data, kinds [size].
  const std::vector<int32_t>& offsets() const { return offsets_; }
  const std::vector<uint8_t>& data() const { return data_; }
  const std::vector<uint8_t>& kinds() const { return kinds_; }

  // A kText id whose bytes are exactly `text` (an ordinary piece rather than a byte-fallback one).
  std::optional<int32_t> find(std::string_view text) const;
  int32_t max_token_bytes() const { return max_token_bytes_; }
  const Tokenizer* tokenizer() const { return tokenizer_; }
  uint64_t serial() const { return serial_; }  // unique per vocabulary object (cache keys)
  size_t memory_bytes() const;

 private:
  TokenVocabulary() = default;
  void finish();

  std::vector<int32_t> offsets_ = {0};
  std::vector<uint8_t> data_;
  std::vector<uint8_t> kinds_;
  std::vector<uint8_t> byte_fallback_;
  std::unordered_map<std::string_view, int32_t> by_bytes_;
  int32_t max_token_bytes_ = 0;
  const Tokenizer* tokenizer_ = nullptr;
  uint64_t serial_ = 0;
};

}  // namespace dgemma::guided
