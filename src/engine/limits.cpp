#include "engine/limits.h"

#include <fmt/format.h>

namespace dgemma::limits {

std::string context_length_message(int64_t max_model_len, int64_t prompt_tokens, int64_t max_tokens,
                                   std::string_view prompt_word) {
  return fmt::format(
      "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the "
      "{}, {} in the completion). Please reduce the length of the {} or completion.",
      max_model_len, prompt_tokens + max_tokens, prompt_tokens, prompt_word, max_tokens, prompt_word);
}

}  // namespace dgemma::limits
