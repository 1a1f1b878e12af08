// Chat templates run on the Jinja interpreter: the variables transformers' apply_chat_template passes
// (messages, tools, documents, add_generation_prompt, the special tokens, chat_template_kwargs).
#include "text/chat/chat_template.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "text/jinja/template.h"
#include "util/error.h"
#include "util/sha256.h"

namespace dgemma {

namespace {

struct KnownTemplate {
  ChatTemplateKind kind;
  std::string_view sha256;  // of the template text, CRLF -> LF, trailing whitespace removed
};
// google/diffusiongemma-26B-A4B-it chat_template.jinja: launch version (June 2026) and the
// "Google Gemma 4 Canonical Chat Template" published 2026-07-09.
constexpr std::array<KnownTemplate, 2> kKnownTemplates = {{
    {ChatTemplateKind::kDiffusionGemma2026_07,
     "9aeb7eac68ad87bba7567e9d4597ff203e5609f1b427d9e823437d0142cc61bf"},
    {ChatTemplateKind::kDiffusionGemma2026_06,
     "36e3a42e5cf14cd0020e72d92e1fdd9970f59b82170e421f0cbe1bb42bead3f0"},
}};

// CRLF -> LF, trailing whitespace removed: what template recognition hashes.
std::string normalise_template_text(std::string_view text) {
  std::string s;
  s.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') continue;
    s.push_back(text[i]);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
    s.pop_back();
  return s;
}

std::optional<ChatTemplateKind> recognise_template(std::string_view jinja_text) {
  const std::string digest = sha256_hex(normalise_template_text(jinja_text));
  for (const KnownTemplate& known : kKnownTemplates)
    if (digest == known.sha256) return known.kind;
  return std::nullopt;
}

// What the template cannot sensibly render: messages is an array of objects with a known string role
// and content that is a string, null or a list of part objects. A template would print any role as a
// turn header and silently drop content of other types; we refuse instead.
void validate_chat_messages(const Json& messages) {
  if (!messages.is_array())
    throw Error(ErrorKind::kInvalidArgument, "'messages' must be an array", "messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    if (!m.is_object())
      throw Error(ErrorKind::kInvalidArgument, fmt::format("messages[{}] must be an object", i), "messages");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      throw Error(ErrorKind::kInvalidArgument, fmt::format("messages[{}].role must be a string", i),
                  "messages");
    const std::string& r = role->get_ref<const std::string&>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("messages[{}].role '{}' is not supported (expected system, developer, user, "
                              "assistant or tool)",
                              i, r),
                  "messages");
    auto content = m.find("content");
    if (content == m.end() || content->is_null() || content->is_string()) continue;
    if (!content->is_array())
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("messages[{}].content must be a string, an array of content parts or null", i),
                  "messages");
    for (size_t k = 0; k < content->size(); ++k)
      if (!(*content)[k].is_object())
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("messages[{}].content[{}] must be an object", i, k), "messages");
  }
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kNotFound, fmt::format("cannot open {}", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Names a template reads that are not chat_template_kwargs: the render's own variables and globals.
bool is_reserved_name(std::string_view n) {
  static constexpr std::string_view kReserved[] = {
      "messages",     "tools",     "documents", "add_generation_prompt",
      "bos_token",    "eos_token", "pad_token", "unk_token",
      "range",        "namespace", "dict",      "raise_exception",
      "strftime_now", "loop",      "caller",    "varargs",
      "kwargs",       "self"};
  for (std::string_view r : kReserved)
    if (r == n) return true;
  return false;
}

}  // namespace

ChatTemplate ChatTemplate::from_template_text(std::string_view jinja_text,
                                              const ChatTemplateSpecialTokens& tokens) {
  ChatTemplate t;
  t.jinja_ = std::make_shared<const jinja::Template>(jinja::Template::parse(jinja_text));
  t.kind_ = recognise_template(jinja_text);
  t.sha256_ = sha256_hex(jinja_text);
  t.tokens_ = tokens;
  auto names = std::make_shared<std::set<std::string, std::less<>>>();
  for (const std::string& n : t.jinja_->free_names())
    if (!is_reserved_name(n)) names->insert(n);
  t.kwargs_ = std::move(names);
  return t;
}

ChatTemplate ChatTemplate::none() {
  return ChatTemplate();
}

ChatTemplate ChatTemplate::from_model_dir(const std::string& model_dir) {
  const auto path = std::filesystem::path(model_dir) / "chat_template.jinja";
  if (!std::filesystem::is_regular_file(path)) return none();
  return from_template_text(read_file(path), special_tokens_from_model_dir(model_dir));
}

std::string ChatTemplate::describe() const {
  if (!present()) return "none";
  std::string s = "jinja, sha256 " + sha256_.substr(0, 12);
  if (kind_) s += fmt::format(" ({})", name(*kind_));
  return s;
}

bool ChatTemplate::accepts_kwarg(std::string_view key) const {
  return present() && kwargs_->count(key) != 0;
}

std::string ChatTemplate::render(const Json& messages, const Json& tools,
                                 const ChatTemplateOptions& opts) const {
  if (!present())
    throw Error(ErrorKind::kInvalidArgument,
                "the model has no chat template (no chat_template.jinja in its directory), so chat messages "
                "cannot be turned into a prompt: start the server with --chat-template FILE",
                "messages");
  validate_chat_messages(messages);
  if (!opts.extra_kwargs.is_object())
    throw Error(ErrorKind::kInvalidArgument, "chat_template_kwargs must be an object",
                "chat_template_kwargs");
  using jinja::Value;
  std::vector<std::pair<std::string, Value>> context;
  context.reserve(9 + opts.extra_kwargs.size());
  context.emplace_back("messages", Value::from_json(messages));
  context.emplace_back("tools", tools.is_null() ? Value::none() : Value::from_json(tools));
  context.emplace_back("documents", Value::none());
  context.emplace_back("add_generation_prompt", Value::boolean(opts.add_generation_prompt));
  context.emplace_back("bos_token", Value::string(tokens_.bos_token));
  context.emplace_back("eos_token", Value::string(tokens_.eos_token));
  context.emplace_back("pad_token", Value::string(tokens_.pad_token));
  context.emplace_back("unk_token", Value::string(tokens_.unk_token));
  for (auto it = opts.extra_kwargs.begin(); it != opts.extra_kwargs.end(); ++it)
    if (accepts_kwarg(it.key())) context.emplace_back(it.key(), Value::from_json(it.value()));
  try {
    return jinja_->render(context);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::kInvalidArgument || !e.param().empty()) throw;
    throw Error(ErrorKind::kInvalidArgument, e.what(), "messages");
  }
}

ChatTemplateSpecialTokens ChatTemplate::special_tokens_from_model_dir(const std::string& model_dir) {
  ChatTemplateSpecialTokens t;
  const auto path = std::filesystem::path(model_dir) / "tokenizer_config.json";
  if (!std::filesystem::is_regular_file(path)) return t;
  const Json cfg = parse_json(read_file(path), path.string(), /*is_file=*/true);
  if (!cfg.is_object()) return t;
  auto read = [&](const char* key, std::string& out) {
    auto it = cfg.find(key);
    if (it == cfg.end()) return;
    if (it->is_string()) out = it->get<std::string>();  // "<bos>" or {"content": "<bos>", ...} (AddedToken)
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
      out = (*it)["content"].get<std::string>();
  };
  read("bos_token", t.bos_token);
  read("eos_token", t.eos_token);
  read("pad_token", t.pad_token);
  read("unk_token", t.unk_token);
  return t;
}

std::string_view ChatTemplate::name(ChatTemplateKind kind) {
  switch (kind) {
    case ChatTemplateKind::kDiffusionGemma2026_07:
      return "diffusiongemma-2026-07";
    case ChatTemplateKind::kDiffusionGemma2026_06:
      return "diffusiongemma-2026-06";
  }
  return "unknown";
}

}  // namespace dgemma
