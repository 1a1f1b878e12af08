#include "api/openai/choice_output.h"

#include <algorithm>

#include "text/parsers/markup_scan.h"
#include "util/error.h"

namespace dgemma {

void OutputDelta::append(OutputDelta&& o) {
  reasoning += o.reasoning;
  content += o.content;
  for (auto& c : o.tool_calls) tool_calls.push_back(std::move(c));
  for (auto& r : o.rejected_tool_calls) rejected_tool_calls.push_back(std::move(r));
  for (auto& l : o.logprobs) logprobs.push_back(std::move(l));
}

ChoiceOutput::ChoiceOutput(const Tokenizer& tok, ChoiceOutputOptions options)
    : tok_(tok), opt_(std::move(options)), detok_(tok, opt_.skip_special_tokens) {
  if (opt_.reasoning) reasoning_ = std::make_unique<ReasoningParser>(opt_.thinking_enabled, opt_.starts_in_reasoning);
  if (opt_.tools) tools_ = std::make_unique<ToolCallParser>();
  for (const auto& s : opt_.stop) max_stop_ = std::max(max_stop_, s.size());
}

Json ChoiceOutput::stop_reason() const {
  if (!stop_string_.empty()) return stop_string_;
  return nullptr;
}

size_t ChoiceOutput::hold_back_bytes() const { return max_stop_ > 0 ? max_stop_ - 1 : 0; }

std::string ChoiceOutput::client_text(std::string_view markup_text) const {
  return markup::render(markup_text, !opt_.skip_special_tokens);
}

// Each call the parser finished is returned as a tool call or rejected; a rejected call's text (and an
// accepted call's stray text) goes to the content at the call's place.
void ChoiceOutput::take_calls(ToolCallParser::Delta&& t, OutputDelta& d) {
  size_t from = 0;
  for (ParsedToolCall& call : t.calls) {
    d.content += client_text(std::string_view(t.content).substr(from, call.content_offset - from));
    from = call.content_offset;
    std::optional<std::string> why;
    if (opt_.declared_tools) why = opt_.declared_tools->reject_reason(call);
    if (why) {
      d.content += client_text(call.text);
      d.rejected_tool_calls.push_back(RejectedToolCall{call.name, std::move(*why)});
      continue;
    }
    d.content += client_text(call.stray);
    const int index = accepted_calls_++;
    if (index > 0 && !opt_.parallel_tool_calls) continue;
    d.tool_calls.push_back(
        ToolCallDelta{index, make_tool_call_id(), std::move(call.name), std::move(call.arguments_json)});
  }
  d.content += client_text(std::string_view(t.content).substr(from));
}

OutputDelta ChoiceOutput::release(std::string_view text, bool final) {
  OutputDelta d;
  std::string content;
  if (reasoning_) {
    ReasoningDelta r = reasoning_->feed(text);
    std::string reasoning = std::move(r.reasoning);
    content = std::move(r.content);
    if (final) {
      ReasoningDelta f = reasoning_->finish();
      reasoning += f.reasoning;
      content += f.content;
    }
    if (!opt_.drop_reasoning) d.reasoning = client_text(reasoning);
  } else {
    content.assign(text);
  }
  if (tools_) {
    take_calls(tools_->feed(content), d);
    if (final) take_calls(tools_->finish(), d);
  } else {
    d.content = client_text(content);
  }
  if (final) finished_ = true;
  return d;
}

OutputDelta ChoiceOutput::feed(const std::vector<int32_t>& tokens, const std::vector<float>& logprobs, int top_n,
                               const std::vector<int32_t>& top_ids, const std::vector<float>& top_logprobs) {
  OutputDelta out;
  if (stopped_ || finished_) return out;

  const size_t n = tokens.size();
  const int64_t counted_before = counted_tokens_;
  for (size_t i = 0; i < n; ++i) {
    text_ += detok_.feed(std::span<const int32_t>(&tokens[i], 1));
    token_ends_.push_back(text_.size());
  }
  counted_tokens_ += static_cast<int64_t>(n);
  if (opt_.logprobs) {
    for (size_t i = 0; i < n; ++i) {
      TokenLogprob lp;
      lp.id = tokens[i];
      auto text_of = [&](int32_t id, std::string& token, std::vector<uint8_t>& bytes) {
        if (id < 0 || id >= tok_.vocab_size()) throw Error(ErrorKind::kInvalidArgument, "engine returned an invalid token id");
        token = tok_.decode(std::span<const int32_t>(&id, 1), false);
        if (auto b = tok_.byte_value(id)) bytes.push_back(*b);
        else bytes.assign(token.begin(), token.end());
      };
      text_of(tokens[i], lp.token, lp.bytes);
      lp.logprob = i < logprobs.size() ? logprobs[i] : 0.0f;
      if (top_n > 0 && top_ids.size() >= (i + 1) * static_cast<size_t>(top_n) && top_logprobs.size() == top_ids.size()) {
        for (int a = 0; a < top_n; ++a) {
          if (top_ids[i * top_n + a] == -1) continue;  // none (a pinned token is its own only alternative)
          TokenLogprob::Alternative alt;
          alt.id = top_ids[i * top_n + a];
          text_of(alt.id, alt.token, alt.bytes);
          alt.logprob = top_logprobs[i * top_n + a];
          lp.top.push_back(std::move(alt));
        }
      }
      out.logprobs.push_back(std::move(lp));
    }
  }

  // Stop strings: the earliest match wins. Nothing before released_ can be part of a match, because at
  // least (longest stop - 1) bytes are always held back.
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const auto& s : opt_.stop) {
    const size_t pos = text_.find(s, released_ > 0 ? released_ : 0);
    if (pos != std::string::npos && (best == std::string::npos || pos < best)) {
      best = pos;
      best_stop = &s;
    }
  }
  if (best_stop) {
    const size_t end = best + best_stop->size();
    // The token that completed the match is the last one counted.
    const auto it = std::lower_bound(token_ends_.begin(), token_ends_.end(), end);
    const int64_t counted = std::min<int64_t>(static_cast<int64_t>(it - token_ends_.begin()) + 1,
                                              static_cast<int64_t>(token_ends_.size()));
    if (counted < counted_tokens_) {
      const int64_t keep_here = std::max<int64_t>(0, counted - counted_before);
      if (static_cast<int64_t>(out.logprobs.size()) > keep_here) out.logprobs.resize(static_cast<size_t>(keep_here));
      counted_tokens_ = counted;
    }
    stop_string_ = *best_stop;
    stopped_ = true;
    text_.resize(opt_.include_stop_str ? end : best);
    out.append(release(std::string_view(text_).substr(released_), true));
    released_ = text_.size();
    return out;
  }

  size_t safe = text_.size() > hold_back_bytes() ? text_.size() - hold_back_bytes() : 0;
  safe = std::max(safe, released_);
  // Never split a UTF-8 sequence: back off to a lead byte.
  while (safe > released_ && safe < text_.size() && (static_cast<unsigned char>(text_[safe]) & 0xC0) == 0x80) --safe;
  if (safe > released_) {
    out.append(release(std::string_view(text_).substr(released_, safe - released_), false));
    released_ = safe;
  }
  return out;
}

OutputDelta ChoiceOutput::finish() {
  OutputDelta out;
  if (finished_) return out;
  if (!stopped_) {
    text_ += detok_.flush();
    for (const auto& s : opt_.stop) {
      const size_t pos = text_.find(s, released_);
      if (pos != std::string::npos) {
        stopped_ = true;
        stop_string_ = s;
        text_.resize(opt_.include_stop_str ? pos + s.size() : pos);
        break;
      }
    }
  }
  out.append(release(std::string_view(text_).substr(std::min(released_, text_.size())), true));
  released_ = text_.size();
  return out;
}

}  // namespace dgemma
