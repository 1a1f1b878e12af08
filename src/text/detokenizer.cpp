#include "text/detokenizer.h"

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

}  // namespace dgemma
