#pragma once
// Internals of Tokenizer shared by tokenizer_load.cpp (tokenizer.json -> Impl) and tokenizer.cpp
// (encode/decode). Not part of the public API.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "util/json.h"

namespace dgemma {
class Tokenizer;
}

namespace dgemma::tokenizer_detail {

// Ids above this are rejected at load time: per-id tables are sized by the largest id.
inline constexpr int32_t kMaxTokenId = (1 << 24) - 1;

// Piece string -> id for the model vocab: one flat open-addressing table (a std::unordered_map of
// 262k strings was the largest cost of loading).
class PieceIndex {
 public:
  // Returns false when `piece` is already present.
  bool insert(std::string piece, int32_t id);
  int32_t find(std::string_view piece) const;  // -1 when absent
  size_t size() const { return entries_.size(); }
  const std::vector<std::pair<std::string, int32_t>>& entries() const { return entries_; }
  void reserve(size_t n);

 private:
  void rehash(size_t slots);
  std::vector<std::pair<std::string, int32_t>> entries_;
  std::vector<uint32_t> slots_;  // entry index + 1, 0 = empty
};

// Open-addressing hash map (left id, right id) -> merge. The merge table is hit once per symbol pair
// while encoding, so it is kept flat and cache-friendly instead of std::unordered_map.
class MergeMap {
 public:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  void reserve(size_t n);
  // Returns false (and keeps the first) when the pair is already present.
  bool insert(int32_t a, int32_t b, Merge m);
  const Merge* find(int32_t a, int32_t b) const {
    if (size_ == 0) return nullptr;
    const uint64_t key = pack(a, b);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &vals_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t pack(int32_t a, int32_t b) {
    return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
  }
  size_t slot(uint64_t key) const { return (key * 0x9E3779B97F4A7C15ull) >> shift_; }
  std::vector<uint64_t> keys_;
  std::vector<Merge> vals_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

// Leftmost-longest matcher over the added tokens' byte strings (HF uses Aho-Corasick with
// MatchKind::LeftmostLongest; a trie walk from each start position gives the same matches, in
// O(text x longest token), and added tokens are short).
class TokenTrie {
 public:
  TokenTrie() { root_.fill(-1); }
  void add(std::string_view s, int32_t value);
  bool empty() const { return nodes_.empty(); }
  // Leftmost-longest match starting at or after `from`. Returns false when there is none.
  bool find(std::string_view text, size_t from, size_t& start, size_t& end, int32_t& value) const;

 private:
  struct Node {
    int32_t value = -1;
    std::vector<std::pair<unsigned char, int32_t>> next;  // sorted by byte
  };
  int32_t child(int32_t node, unsigned char b) const;
  std::array<int32_t, 256> root_;  // root's children, as a table: most positions fail here
  std::vector<Node> nodes_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct NormalizerStep {
  enum class Kind { kReplace, kPrepend } kind;
  std::string pattern;  // kReplace only
  std::string content;
};

struct SplitStep {
  std::string pattern;
  SplitBehavior behavior;
  bool invert;
};

struct AddedToken {
  std::string content;
  int32_t id;
  bool special;
  bool normalized;  // matched on normalised text (true) or on the raw input (false)
};

struct Impl {
  std::string what;  // the source, for messages

  // --- BPE model ---
  PieceIndex vocab;  // model vocab
  MergeMap merges;
  std::vector<int32_t> bmp_ids;                     // single-character pieces, U+0000..U+FFFF (-1: none)
  std::unordered_map<char32_t, int32_t> astral_ids; // single-character pieces above U+FFFF
  std::array<int32_t, 256> byte_ids;                // "<0xXX>" pieces, -1 when absent
  bool all_bytes_present = false;
  int32_t unk_id = -1;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;

  // Splitting a word right before a "▁" cannot change the BPE result when no vocab piece contains
  // the preceding piece's last character followed by "▁" (no merge can then span the cut). This
  // lets ordinary text be encoded word by word (with a per-call cache) although Gemma's pipeline
  // hands BPE one word per segment. See tokenizer.cpp.
  bool split_before_meta = false;
  int32_t meta_id = -1;
  std::unordered_set<char32_t> chars_before_meta;  // chars followed by "▁" inside some vocab piece

  // --- added tokens ---
  std::vector<AddedToken> added;                   // index = trie value
  std::unordered_map<std::string, int32_t> added_ids;  // content -> id
  TokenTrie raw_trie;   // normalized=false tokens, matched on the raw input
  TokenTrie norm_trie;  // normalized=true tokens, matched on normalised segments

  // --- pipeline ---
  std::vector<NormalizerStep> normalizer;
  std::vector<SplitStep> pre_tokenizer;
  bool decoder_byte_fallback = false;
  std::vector<std::pair<std::string, std::string>> decoder_replacements;  // before ByteFallback

  // --- per id ---
  int32_t vocab_size = 0;
  std::vector<std::string> pieces;     // raw piece (added tokens override the model's)
  std::vector<std::string> texts;      // piece after the decoder's per-piece Replace steps
  std::vector<int16_t> byte_value;     // byte of a byte-fallback piece, else -1
  std::vector<uint8_t> present;        // 0 for holes
  std::vector<uint8_t> special;
};

// For unit tests only: reach the internals of a loaded Tokenizer.
struct TestAccess {
  static Impl& impl(Tokenizer& tok);
};

// Every non-overlapping occurrence of `pattern` (non-empty), left to right, replaced by `content`.
std::string replace_all(std::string_view s, std::string_view pattern, std::string_view content);

struct RawMerge {
  std::string a, b;
  bool is_pair;  // ["a", "b"]; otherwise `a` holds the old "a b" form
};

// tokenizer.json split into the two big tables and a DOM of everything else (tokenizer_json.cpp).
struct RawTokenizerJson {
  Json rest;  // the whole file minus model.vocab and model.merges
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<RawMerge> merges;
  bool has_vocab = false, has_merges = false;
  std::string vocab_error, merges_error;  // shape problems found while streaming
};

// Throws Error(kInvalidFile) on malformed JSON or nesting deeper than kMaxJsonDepth.
RawTokenizerJson read_tokenizer_json(std::string_view text, std::string_view what);

// Runs the normaliser steps on one text segment.
std::string normalize(const Impl& impl, std::string_view segment);

// Builds an Impl from tokenizer.json text; throws Error(kInvalidFile) naming `what`.
void load_impl(Impl& impl, std::string_view json_text);

}  // namespace dgemma::tokenizer_detail
