#pragma once
// The chat template: turns OpenAI-style messages into the prompt text by running a Hugging Face chat
// template (a model's chat_template.jinja or --chat-template) on the Jinja interpreter in
// src/text/jinja/, with the environment transformers' apply_chat_template uses. Tested byte for byte
// against python3-jinja2 rendering the real DiffusionGemma templates (tests/fixtures/chat_template/,
// produced by tools/chat_template/render_expectations.py), and the interpreter against a generated
// corpus (tests/fixtures/jinja/). A model directory without a template has none: rendering a chat
// then fails with a request error that names --chat-template.
//
// Callers: OpenAI clients send tool_calls[].function.arguments as a JSON *string*; the DiffusionGemma
// templates reject that (raise_exception), so parse it into an object before rendering (as vLLM does).
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

// The published DiffusionGemma templates, recognised by content (for logs).
enum class ChatTemplateKind {
  kDiffusionGemma2026_07,  // "Google Gemma 4 Canonical Chat Template", published 2026-07-09
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
  // which ChatTemplate::accepts_kwarg() is true are passed to the template; others are ignored here.
  Json extra_kwargs = Json::object();
};

class ChatTemplate {
 public:
  // No template: render() fails with Error(kInvalidArgument) naming --chat-template.
  static ChatTemplate none();

  // Any Hugging Face chat template text (a model's chat_template.jinja or a --chat-template), compiled
  // for the Jinja interpreter. Throws Error(kUnsupported, "chat template line N: ...") naming the
  // construct when the template uses Jinja beyond the supported subset or does not parse.
  static ChatTemplate from_template_text(std::string_view jinja_text,
                                         const ChatTemplateSpecialTokens& tokens = {});

  // The model directory's chat_template.jinja (with the special tokens of its tokenizer_config.json),
  // else none().
  static ChatTemplate from_model_dir(const std::string& model_dir);

  // messages / tools in OpenAI chat format (as parsed from the request JSON; tools may be null).
  // Returns the prompt text, control tokens as text (the tokenizer maps control-token strings to ids
  // when special tokens are allowed). Throws Error(kInvalidArgument, message, param) for what the
  // template itself rejects (raise_exception, an UndefinedError...) or what cannot be rendered
  // (unknown role, bad content type, ...), and when there is no template.
  std::string render(const Json& messages, const Json& tools, const ChatTemplateOptions& opts) const;

  bool present() const { return jinja_ != nullptr; }
  // The DiffusionGemma template the text was recognised as (by content); nullopt for any other.
  std::optional<ChatTemplateKind> kind() const { return kind_; }
  // For logs: "jinja, sha256 1a2b3c4d5e6f (diffusiongemma-2026-07)", or "none".
  std::string describe() const;
  // SHA-256 of the template text (empty without a template).
  const std::string& sha256() const { return sha256_; }

  // Whether chat_template_kwargs / --default-chat-template-kwargs may set `key`: the variables the
  // template reads other than messages, tools, the special tokens... (none without a template).
  bool accepts_kwarg(std::string_view key) const;

  // Human-readable name ("diffusiongemma-2026-07"), for logs.
  static std::string_view name(ChatTemplateKind kind);

  // Loads the special tokens from a model directory's tokenizer_config.json (defaults when absent).
  static ChatTemplateSpecialTokens special_tokens_from_model_dir(const std::string& model_dir);

 private:
  ChatTemplate() = default;

  std::optional<ChatTemplateKind> kind_;
  std::shared_ptr<const jinja::Template> jinja_;
  std::shared_ptr<const std::set<std::string, std::less<>>> kwargs_;  // accepted kwargs
  ChatTemplateSpecialTokens tokens_;
  std::string sha256_;
};

}  // namespace dgemma
