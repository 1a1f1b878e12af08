#include "text/detokenizer.h"

namespace dgemma {
IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}
std::string IncrementalDetokenizer::feed(std::span<const int32_t>) { return {}; }
std::string IncrementalDetokenizer::flush() { return {}; }
}  // namespace dgemma
