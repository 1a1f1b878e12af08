#pragma once
// Streaming detokenisation on top of Tokenizer (text/tokenizer/tokenizer.h).
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "text/tokenizer/tokenizer.h"

namespace dgemma {

// Incremental detokenizer: feed ids as they arrive (a whole 256-token canvas at a time, or one by
// one); returns only text whose UTF-8 is complete; holds back an unfinished run of byte-fallback
// pieces (HF turns a whole invalid run into U+FFFD per byte, so a run can only be decided when it
// ends); flush() at the end. Concatenating every feed() and flush() equals Tokenizer::decode(all).
// Throws Error(kInvalidArgument) on an out-of-range id (the state stays as before that call).
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tok, bool skip_special);
  std::string feed(std::span<const int32_t> ids);
  std::string feed_one(int32_t id) { return feed(std::span<const int32_t>(&id, 1)); }
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_bytes_;  // bytes of the current, unfinished byte-fallback run
};

// Model output as markup text (text/parsers/markup_scan.h): the Gemma 4 markup tokens, found by id in the
// vocabulary, become their markup bytes; every other id decodes as IncrementalDetokenizer decodes it
// (skip_special: the other special tokens, <pad>, <eos>, <turn|>, ..., give no text). A markup token
// ends a run of byte-fallback pieces. So markup::render(all text, false) is the output decoded with
// special tokens skipped, and markup::render(all text, true) with skip_special false is decode(ids)
// (up to byte runs cut by a markup token). Throws Error(kInvalidArgument) on an out-of-range id.
class MarkupDetokenizer {
 public:
  MarkupDetokenizer(const Tokenizer& tok, bool skip_special);
  std::string feed(std::span<const int32_t> ids);
  std::string flush();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<std::pair<int32_t, char>> markup_;  // id -> markup byte, for the tokens the vocabulary has
  std::string pending_bytes_;
};

}  // namespace dgemma
