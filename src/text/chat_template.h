#pragma once
// The chat template: turns OpenAI-style messages into the prompt text. Two mechanisms:
//  - any Hugging Face chat template (a model's chat_template.jinja or --chat-template) runs on the
//    Jinja interpreter in src/text/jinja/, with the environment transformers' apply_chat_template uses;
//  - the two DiffusionGemma templates are also re-implemented natively (chat_template.cpp), as the
//    built-in default for model directories without a chat_template.jinja (the template text is not
//    shipped with dgemma) and for `dgemma generate`.
// Both are tested byte for byte against python3-jinja2 rendering the real template files
// (tests/fixtures/chat_template/, produced by tools/chat_template/render_expectations.py), and the
// interpreter against a generated corpus (tests/fixtures/jinja/).
//
// Callers: OpenAI clients send tool_calls[].function.arguments as a JSON *string*; the July template
// rejects that (raise_exception), so parse it into an object before rendering (as vLLM does).
//
// Where the output can differ from jinja2 (none of it reachable with well-formed requests to the
// DiffusionGemma templates):
//  - nlohmann::json keeps object keys sorted, Python dicts keep the request's order. A template shows
//    that order when it iterates or prints an object (e.g. `tools | tojson`), or when dictsort sees
//    keys equal ignoring case ("B" and "b": jinja2 keeps request order, we byte order).
//  - integers beyond 64 bits arrive as doubles; Greek final-sigma is not special-cased by lower().
//  - we refuse unknown roles and content that is not a string, null or a list of part objects, which
//    the template would render as a turn header or silently drop.
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "util/json.h"

namespace dgemma {

enum class ChatTemplateKind {
  kDiffusionGemma2026_07,  // "Google Gemma 4 Canonical Chat Template", published 2026-07-09 (default)
  kDiffusionGemma2026_06,  // launch template (June 2026), same as vLLM's tool_chat_template_gemma4
};

namespace jinja {
class Template;
}

// The special-token variables HF passes to every template (from the model's tokenizer_config.json).
struct ChatTemplateSpecialTokens {
  std::string bos_token = "<bos>";
  std::string eos_token = "<eos>";
  std::string pad_token = "<pad>";
  std::string unk_token = "<unk>";
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
  // A built-in DiffusionGemma template, rendered natively.
  explicit ChatTemplate(ChatTemplateKind kind);

  // Any Hugging Face chat template text (a model's chat_template.jinja or a --chat-template), compiled
  // for the Jinja interpreter. Throws Error(kUnsupported, "chat template line N: ...") naming the
  // construct when the template uses Jinja beyond the supported subset or does not parse.
  static ChatTemplate from_template_text(std::string_view jinja_text, const ChatTemplateSpecialTokens& tokens = {});

  // messages / tools in OpenAI chat format (as parsed from the request JSON; tools may be null).
  // Returns the prompt text, control tokens as text (the tokenizer maps control-token strings to ids
  // when special tokens are allowed). Throws Error(kInvalidArgument, message, param) for what the
  // template itself rejects (raise_exception, an UndefinedError...) or what cannot be rendered
  // (unknown role, bad content type, non-mapping tool arguments in the July template, ...).
  std::string render(const Json& messages, const Json& tools, const ChatTemplateOptions& opts) const;

  // The built-in template, or the DiffusionGemma template the text was recognised as (by content);
  // nullopt for any other template.
  std::optional<ChatTemplateKind> kind() const { return kind_; }
  // For logs: "diffusiongemma-2026-07 (built-in)" or "jinja, sha256 1a2b3c4d5e6f (diffusiongemma-2026-07)".
  std::string describe() const;
  // SHA-256 of the template text (empty for a built-in template).
  const std::string& sha256() const { return sha256_; }

  // Whether chat_template_kwargs / --default-chat-template-kwargs may set `key`: for a Jinja template
  // the variables it reads (other than messages, tools, the special tokens...), for a built-in one
  // enable_thinking and preserve_thinking.
  bool accepts_kwarg(std::string_view key) const;

  // The built-in templates' kwargs (enable_thinking, preserve_thinking).
  static bool is_allowed_kwarg(std::string_view key);

  // Human-readable name ("diffusiongemma-2026-07"), for logs and /v1/models metadata.
  static std::string_view name(ChatTemplateKind kind);

  // Loads the special tokens from a model directory's tokenizer_config.json (defaults when absent).
  static ChatTemplateSpecialTokens special_tokens_from_model_dir(const std::string& model_dir);

 private:
  ChatTemplate() = default;
  std::string render_jinja(const Json& messages, const Json& tools, const ChatTemplateOptions& opts) const;

  std::optional<ChatTemplateKind> kind_;
  bool native_ = false;  // render with the native renderer (built-in templates)
  std::shared_ptr<const jinja::Template> jinja_;
  std::shared_ptr<const std::set<std::string, std::less<>>> kwargs_;  // accepted kwargs of a Jinja template
  ChatTemplateSpecialTokens tokens_;
  std::string sha256_;
};

}  // namespace dgemma
