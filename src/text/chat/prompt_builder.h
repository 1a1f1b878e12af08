#pragma once
// Request -> prompt token ids. Chat prompts are rendered with the model's chat template and tokenised
// so that control tokens come only from the template: a "<|turn>" typed by a user (in a user, system,
// developer or tool message, a tool definition or tool-call arguments) is tokenised as plain text,
// never as the control token (prompt injection). Assistant messages are model output being replayed,
// so their markers (thought channel, tool calls) keep their meaning, as in the reference template.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"
#include "util/json.h"

namespace dgemma {

// A prompt certainly longer than the limit given to PromptBuilder: tokenising stopped early, so a
// huge prompt costs memory in proportion to the limit, not to its size.
struct PromptTooLong : std::runtime_error {
  explicit PromptTooLong(int64_t n) : std::runtime_error("prompt too long"), at_least(n) {}
  int64_t at_least;  // a lower bound of the prompt's token count (> the limit)
};

class PromptBuilder {
 public:
  PromptBuilder(const Tokenizer& tok, ChatTemplate tmpl);

  // Throws Error(kInvalidArgument, ..., param) for what the template rejects. limit > 0: throws
  // PromptTooLong as soon as the prompt is certainly longer than `limit` tokens.
  std::vector<int32_t> chat(const Json& messages, const Json& tools, const ChatTemplateOptions& opts,
                            int64_t limit = 0) const;
  // Assistant prefill (continue_final_message): the chat rendered without a generation prompt and cut
  // right after the final message's text, found the way transformers' apply_chat_template finds it
  // (the last occurrence of `final_text` stripped; its trailing whitespace kept only where the template
  // kept it). The tokens of that text are split where the prompt without the final text stops
  // agreeing with them: `prompt` + `prefill` is exactly the tokenised cut text, `prefill` is what the
  // answer starts with (pinned). Throws Error(kInvalidArgument) when the template does not render the
  // text verbatim (e.g. a thought block it strips).
  struct Continuation {
    std::vector<int32_t> prompt;
    std::vector<int32_t> prefill;
  };
  Continuation chat_continue(const Json& messages, const Json& tools, const ChatTemplateOptions& opts,
                             const std::string& final_text, int64_t limit = 0) const;
  // The rendered chat prompt text (control tokens as text), for /tokenize-style inspection and tests.
  std::string chat_text(const Json& messages, const Json& tools, const ChatTemplateOptions& opts) const;
  // Completions: the client writes the whole prompt, control tokens included.
  std::vector<int32_t> text(std::string_view prompt, int64_t limit = 0) const;

  const ChatTemplate& chat_template() const { return tmpl_; }
  const Tokenizer& tokenizer() const { return tok_; }

 private:
  struct Protected;
  Json protect_messages(const Json& messages, Protected& p) const;
  Json protect_value(const Json& v, Protected& p) const;
  std::string protect_string(const std::string& s, Protected& p) const;
  std::vector<int32_t> tokenize_rendered(const std::string& rendered, const Protected& p, int64_t limit) const;
  // Appends the tokens of `text` to `ids`; limit > 0: throws PromptTooLong once ids certainly exceed it.
  void encode_bounded(std::string_view text, bool allow_special, int64_t limit, std::vector<int32_t>& ids) const;

  const Tokenizer& tok_;
  ChatTemplate tmpl_;
  std::vector<std::string> specials_;  // special token strings, longest first
  bool first_byte_[256] = {};
};

}  // namespace dgemma
