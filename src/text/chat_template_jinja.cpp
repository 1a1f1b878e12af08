// Chat templates run on the Jinja interpreter: the variables transformers' apply_chat_template passes
// (messages, tools, documents, add_generation_prompt, the special tokens, chat_template_kwargs).
#include <filesystem>
#include <fstream>
#include <sstream>

#include "text/chat_template.h"
#include "text/chat_template_internal.h"
#include "text/jinja/template.h"
#include "util/error.h"
#include "util/sha256.h"

namespace dgemma {

namespace {

// Names a template reads that are not chat_template_kwargs: the render's own variables and globals.
bool is_reserved_name(std::string_view n) {
  static constexpr std::string_view kReserved[] = {
      "messages", "tools",     "documents", "add_generation_prompt", "bos_token", "eos_token", "pad_token",
      "unk_token", "range",    "namespace", "dict",  "raise_exception", "strftime_now", "loop",   "caller",
      "varargs",  "kwargs",    "self"};
  for (std::string_view r : kReserved)
    if (r == n) return true;
  return false;
}

}  // namespace

ChatTemplate ChatTemplate::from_template_text(std::string_view jinja_text, const ChatTemplateSpecialTokens& tokens) {
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

std::string ChatTemplate::describe() const {
  if (native_) return fmt::format("{} (built-in)", name(*kind_));
  std::string s = "jinja, sha256 " + sha256_.substr(0, 12);
  if (kind_) s += fmt::format(" ({})", name(*kind_));
  return s;
}

bool ChatTemplate::accepts_kwarg(std::string_view key) const {
  if (native_) return is_allowed_kwarg(key);
  return kwargs_->count(key) != 0;
}

std::string ChatTemplate::render_jinja(const Json& messages, const Json& tools, const ChatTemplateOptions& opts) const {
  validate_chat_messages(messages);
  if (!opts.extra_kwargs.is_object())
    throw Error(ErrorKind::kInvalidArgument, "chat_template_kwargs must be an object", "chat_template_kwargs");
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
  std::ifstream in(path, std::ios::binary);
  if (!in) return t;
  std::ostringstream ss;
  ss << in.rdbuf();
  const Json cfg = parse_json(ss.str(), path.string(), /*is_file=*/true);
  if (!cfg.is_object()) return t;
  auto read = [&](const char* key, std::string& out) {
    auto it = cfg.find(key);
    if (it == cfg.end()) return;
    if (it->is_string()) out = it->get<std::string>();  // "<bos>" or {"content": "<bos>", ...} (AddedToken)
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) out = (*it)["content"].get<std::string>();
  };
  read("bos_token", t.bos_token);
  read("eos_token", t.eos_token);
  read("pad_token", t.pad_token);
  read("unk_token", t.unk_token);
  return t;
}

}  // namespace dgemma
