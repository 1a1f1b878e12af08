#include "text/tokenizer/detokenizer.h"

#include "text/parsers/markup_scan.h"
#include "util/error.h"

namespace dgemma {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::feed(std::span<const int32_t> ids) {
  std::string out;
  tok_.decode_append(ids, skip_special_, pending_bytes_, out);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  Tokenizer::flush_byte_run(pending_bytes_, out);
  return out;
}

MarkupDetokenizer::MarkupDetokenizer(const Tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {
  for (const markup::MarkupToken& t : markup::kMarkupTokens)
    if (const auto id = tok.token_to_id(t.literal)) markup_.emplace_back(*id, t.code[0]);
}

std::string MarkupDetokenizer::feed(std::span<const int32_t> ids) {
  const int vocab = tok_.vocab_size();
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      fail(ErrorKind::kInvalidArgument, "token id {} is out of range [0, {})", id, vocab);
  std::string out;
  size_t run = 0;  // start of the ids not yet decoded
  for (size_t i = 0; i < ids.size(); ++i) {
    char code = 0;
    for (const auto& [mid, c] : markup_)
      if (mid == ids[i]) code = c;
    if (code == 0) continue;
    tok_.decode_append(ids.subspan(run, i - run), skip_special_, pending_bytes_, out);
    Tokenizer::flush_byte_run(pending_bytes_, out);
    out += code;
    run = i + 1;
  }
  tok_.decode_append(ids.subspan(run), skip_special_, pending_bytes_, out);
  return out;
}

std::string MarkupDetokenizer::flush() {
  std::string out;
  Tokenizer::flush_byte_run(pending_bytes_, out);
  return out;
}

}  // namespace dgemma
