#pragma once
// Native renderer for the DiffusionGemma chat template. We do not interpret Jinja: the two published
// versions of the model's template are re-implemented in C++ and tested byte for byte against
// python3-jinja2 rendering the real template files (tests/fixtures/chat_template/, produced by
// tools/chat_template/render_expectations.py). A model directory's chat_template.jinja is only
// recognised (by content hash), never executed.
//
// Callers: OpenAI clients send tool_calls[].function.arguments as a JSON *string*; the July template
// rejects that (raise_exception), so parse it into an object before rendering (as vLLM does).
//
// Where the output can differ from jinja2 (none of it reachable with well-formed requests):
//  - nlohmann::json keeps object keys sorted, Python dicts keep the request's order. The template shows
//    that order only when it iterates or prints an object given where a list/string belongs, or when
//    dictsort sees keys equal ignoring case ("B" and "b": jinja2 keeps request order, we byte order).
//  - integers beyond 64 bits arrive as doubles; Greek final-sigma is not special-cased when keys are
//    lower-cased for sorting.
//  - we refuse unknown roles and content that is not a string, null or a list of part objects, which
//    the template would render as a turn header or silently drop.
#include <string>
#include <string_view>

#include "util/json.h"

namespace dgemma {

enum class ChatTemplateKind {
  kDiffusionGemma2026_07,  // "Google Gemma 4 Canonical Chat Template", published 2026-07-09 (default)
  kDiffusionGemma2026_06,  // launch template (June 2026), same as vLLM's tool_chat_template_gemma4
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  // chat_template_kwargs, e.g. {"enable_thinking": true, "preserve_thinking": true}. Only keys for
  // which ChatTemplate::is_allowed_kwarg() is true are read; others are ignored here (the API layer
  // rejects them).
  Json extra_kwargs = Json::object();
};

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatTemplateKind kind);

  // Recognises a model directory's chat_template.jinja text (or a --chat-template file) as one of the
  // known templates, by SHA-256 of the content (CRLF normalised to LF, trailing whitespace ignored).
  // Throws Error(kUnsupported) with a clear message for any other template.
  static ChatTemplate from_template_text(std::string_view jinja_text);

  // messages / tools in OpenAI chat format (as parsed from the request JSON; tools may be null).
  // Returns the prompt text, starting with "<bos>" as text (the tokenizer maps control-token strings
  // to ids when special tokens are allowed). Throws Error(kInvalidArgument, message, param) for what
  // the template itself rejects (raise_exception) or what cannot be rendered (unknown role, bad
  // content type, non-mapping tool arguments in the July template, ...).
  std::string render(const Json& messages, const Json& tools, const ChatTemplateOptions& opts) const;

  ChatTemplateKind kind() const { return kind_; }

  // Allow-listed chat_template_kwargs keys (enable_thinking, preserve_thinking).
  static bool is_allowed_kwarg(std::string_view key);

  // Human-readable name ("diffusiongemma-2026-07"), for logs and /v1/models metadata.
  static std::string_view name(ChatTemplateKind kind);

 private:
  ChatTemplateKind kind_;
};

}  // namespace dgemma
