#include "text/chat/prompt_builder.h"

#include <algorithm>

#include "util/error.h"

namespace dgemma {
namespace {

// U+10FFFD (a private-use code point) brackets the index of a protected string in the rendered text.
constexpr std::string_view kMark = "\xF4\x8F\xBF\xBD";

}  // namespace

struct PromptBuilder::Protected {
  std::vector<std::string> originals;
};

PromptBuilder::PromptBuilder(const Tokenizer& tok, ChatTemplate tmpl) : tok_(tok), tmpl_(tmpl) {
  for (int32_t id = 0; id < tok_.vocab_size(); ++id) {
    if (!tok_.is_special(id)) continue;
    std::string s = tok_.id_to_token(id);
    if (s.empty()) continue;
    first_byte_[static_cast<unsigned char>(s[0])] = true;
    specials_.push_back(std::move(s));
  }
  std::sort(specials_.begin(), specials_.end(),
            [](const std::string& a, const std::string& b) { return a.size() != b.size() ? a.size() > b.size() : a < b; });
}

std::string PromptBuilder::protect_string(const std::string& s, Protected& p) const {
  std::string out;
  size_t i = 0, copied = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t match = 0;
    if (s.compare(i, kMark.size(), kMark) == 0) {
      match = kMark.size();
    } else if (first_byte_[c]) {
      for (const auto& sp : specials_)
        if (s.compare(i, sp.size(), sp) == 0) {
          match = sp.size();
          break;
        }
    }
    if (match == 0) {
      ++i;
      continue;
    }
    out.append(s, copied, i - copied);
    out += kMark;
    out += std::to_string(p.originals.size());
    out += kMark;
    p.originals.push_back(s.substr(i, match));
    i += match;
    copied = i;
  }
  if (copied == 0) return s;
  out.append(s, copied, std::string::npos);
  return out;
}

Json PromptBuilder::protect_value(const Json& v, Protected& p) const {
  if (v.is_string()) return protect_string(v.get_ref<const std::string&>(), p);
  if (v.is_array()) {
    Json out = Json::array();
    for (const auto& e : v) out.push_back(protect_value(e, p));
    return out;
  }
  if (v.is_object()) {
    Json out = Json::object();
    for (auto it = v.begin(); it != v.end(); ++it) out[protect_string(it.key(), p)] = protect_value(it.value(), p);
    return out;
  }
  return v;
}

Json PromptBuilder::protect_messages(const Json& messages, Protected& p) const {
  Json out = Json::array();
  for (const auto& m : messages) {
    const bool assistant = m.is_object() && m.value("role", "") == "assistant";
    if (!assistant) {
      out.push_back(protect_value(m, p));
      continue;
    }
    Json copy = m;
    if (auto it = m.find("tool_calls"); it != m.end()) copy["tool_calls"] = protect_value(*it, p);
    out.push_back(std::move(copy));
  }
  return out;
}

namespace {
// Long texts are first counted in pieces of this size. Cutting a text changes its BPE tokens only
// near the cut (a few tokens either side), so the pieces' total minus kCutSlack per cut is a lower
// bound of the whole text's count.
constexpr size_t kCountPiece = 64 << 10;
constexpr int64_t kCutSlack = 8;
}  // namespace

void PromptBuilder::encode_bounded(std::string_view text, bool allow_special, int64_t limit,
                                   std::vector<int32_t>& ids) const {
  const int64_t have = static_cast<int64_t>(ids.size());
  if (limit > 0 && text.size() > 4 * kCountPiece) {
    int64_t counted = 0, cuts = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = std::min(text.size(), pos + kCountPiece);
      while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;  // whole characters
      counted += static_cast<int64_t>(tok_.encode(text.substr(pos, end - pos), allow_special).size());
      if (end < text.size()) ++cuts;
      pos = end;
      const int64_t at_least = have + counted - kCutSlack * cuts;
      if (at_least > limit) throw PromptTooLong(at_least);
    }
  }
  auto seg = tok_.encode(text, allow_special);
  ids.insert(ids.end(), seg.begin(), seg.end());
  if (limit > 0 && static_cast<int64_t>(ids.size()) > limit) throw PromptTooLong(static_cast<int64_t>(ids.size()));
}

std::vector<int32_t> PromptBuilder::tokenize_rendered(const std::string& rendered, const Protected& p, int64_t limit) const {
  if (p.originals.empty()) {
    std::vector<int32_t> ids;
    encode_bounded(rendered, /*allow_special=*/true, limit, ids);
    return ids;
  }
  // Split at the template's own control tokens (leftmost-longest, as the tokenizer does); inside the
  // plain segments put the protected strings back and tokenise them with control tokens disabled.
  std::vector<int32_t> ids;
  std::string plain;
  auto flush_plain = [&] {
    if (plain.empty()) return;
    encode_bounded(plain, /*allow_special=*/false, limit, ids);
    plain.clear();
  };
  size_t i = 0;
  while (i < rendered.size()) {
    if (rendered.compare(i, kMark.size(), kMark) == 0) {
      // A placeholder "MARK<index>MARK"; anything else (a template that cut one apart) stays as text.
      const size_t num_start = i + kMark.size();
      size_t num_end = num_start;
      while (num_end < rendered.size() && num_end - num_start < 10 && rendered[num_end] >= '0' && rendered[num_end] <= '9')
        ++num_end;
      if (num_end > num_start && rendered.compare(num_end, kMark.size(), kMark) == 0) {
        const size_t index = std::stoul(rendered.substr(num_start, num_end - num_start));
        if (index < p.originals.size()) {
          plain += p.originals[index];
          i = num_end + kMark.size();
          continue;
        }
      }
    }
    const unsigned char c = static_cast<unsigned char>(rendered[i]);
    const std::string* hit = nullptr;
    if (first_byte_[c])
      for (const auto& sp : specials_)
        if (rendered.compare(i, sp.size(), sp) == 0) {
          hit = &sp;
          break;
        }
    if (!hit) {
      plain.push_back(rendered[i++]);
      continue;
    }
    flush_plain();
    auto id = tok_.token_to_id(*hit);
    DG_CHECK(id.has_value());
    ids.push_back(*id);
    i += hit->size();
  }
  flush_plain();
  return ids;
}

std::string PromptBuilder::chat_text(const Json& messages, const Json& tools, const ChatTemplateOptions& opts) const {
  return tmpl_.render(messages, tools, opts);
}

std::vector<int32_t> PromptBuilder::chat(const Json& messages, const Json& tools, const ChatTemplateOptions& opts,
                                         int64_t limit) const {
  Protected p;
  const Json safe_messages = protect_messages(messages, p);
  const Json safe_tools = tools.is_null() ? Json(nullptr) : protect_value(tools, p);
  const std::string rendered = tmpl_.render(safe_messages, safe_tools, opts);
  return tokenize_rendered(rendered, p, limit);
}

PromptBuilder::Continuation PromptBuilder::chat_continue(const Json& messages, const Json& tools,
                                                        const ChatTemplateOptions& opts, const std::string& final_text,
                                                        int64_t limit) const {
  Protected p;
  const Json safe_messages = protect_messages(messages, p);
  const Json safe_tools = tools.is_null() ? Json(nullptr) : protect_value(tools, p);
  const std::string rendered = tmpl_.render(safe_messages, safe_tools, opts);
  const std::string_view ws = " \t\r\n";
  const size_t b = final_text.find_first_not_of(ws);
  if (b == std::string::npos) fail_arg("'continue_final_message' needs text to continue");
  const std::string lstripped = final_text.substr(b);
  const std::string stripped = lstripped.substr(0, lstripped.find_last_not_of(ws) + 1);
  const size_t loc = rendered.rfind(stripped);
  if (loc == std::string::npos)
    throw Error(ErrorKind::kInvalidArgument,
                "continue_final_message is set but the final message does not appear in the chat after applying the "
                "chat template (the template rewrites it, e.g. strips a thought block)",
                "continue_final_message");
  const size_t end = rendered.compare(loc, lstripped.size(), lstripped) == 0 ? loc + lstripped.size()
                                                                             : loc + stripped.size();
  std::vector<int32_t> full = tokenize_rendered(rendered.substr(0, end), p, limit);
  const std::vector<int32_t> before = tokenize_rendered(rendered.substr(0, loc), p, limit);
  const size_t common =
      static_cast<size_t>(std::mismatch(full.begin(), full.end(), before.begin(), before.end()).first - full.begin());
  Continuation out;
  out.prefill.assign(full.begin() + static_cast<std::ptrdiff_t>(common), full.end());
  full.resize(common);
  out.prompt = std::move(full);
  return out;
}

std::vector<int32_t> PromptBuilder::text(std::string_view prompt, int64_t limit) const {
  std::vector<int32_t> ids;
  encode_bounded(prompt, /*allow_special=*/true, limit, ids);
  return ids;
}

}  // namespace dgemma
