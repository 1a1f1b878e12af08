// Fuzz target for the text-layer output parsers: parse_tool_calls, the streaming ToolCallParser,
// gemma4_args_to_json and the reasoning parser (all modes), on the input as markup text (its spelled-out
// markup turned into markup bytes, as the corpus writes it). Bad input may raise dgemma::Error;
// anything else (a crash, a hang, another exception) is a bug. Invariants checked, abort() on violation:
//  - streaming in 3 chunks (and in 1-byte chunks for short inputs) == non-streaming;
//  - every call's arguments are a valid JSON object (valid UTF-8 included);
//  - the parsers never invent text: output sizes are bounded by the input size;
//  - every call's text lies in the input, and content_offset is ordered and within the content.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "text/parsers/gemma4_args.h"
#include "text/parsers/markup_scan.h"
#include "text/parsers/reasoning_parser.h"
#include "text/parsers/tool_parser.h"
#include "util/error.h"

namespace {

using namespace dgemma;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_tool_call: invariant violated: %s\n", what);
  std::abort();
}

struct Outcome {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  std::vector<std::string> texts;
  bool operator==(const Outcome&) const = default;
};

Outcome outcome_of(const ToolParseResult& r, std::string_view input) {
  Outcome o{r.content, {}, {}};
  size_t last = 0;
  for (const ParsedToolCall& c : r.calls) {
    const auto j = nlohmann::json::parse(c.arguments_json, nullptr, false);
    if (j.is_discarded() || !j.is_object()) die("arguments are not a JSON object");
    if (c.name.empty() && c.arguments != ParsedToolCall::Arguments::kNoBody) die("a call without a name");
    if (input.find(c.text) == std::string_view::npos) die("a call's text is not in the input");
    if (c.content_offset < last || c.content_offset > r.content.size()) die("content_offset out of order");
    last = c.content_offset;
    o.calls.emplace_back(c.name, c.arguments_json);
    o.texts.push_back(c.text);
  }
  return o;
}

Outcome stream_tools(const std::vector<std::string_view>& pieces, std::string_view input) {
  ToolCallParser p;
  ToolParseResult all;
  const auto absorb = [&](ToolCallParser::Delta&& d) {
    for (ParsedToolCall& c : d.calls) {
      c.content_offset += all.content.size();
      all.calls.push_back(std::move(c));
    }
    all.content += d.content;
  };
  for (std::string_view piece : pieces) absorb(p.feed(piece));
  absorb(p.finish());
  if (p.saw_tool_call() != !all.calls.empty()) die("saw_tool_call");
  return outcome_of(all, input);
}

ReasoningDelta stream_reasoning(const std::vector<std::string_view>& pieces, bool thinking, bool opened) {
  ReasoningParser p(thinking, opened);
  ReasoningDelta all;
  for (std::string_view piece : pieces) {
    ReasoningDelta d = p.feed(piece);
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  ReasoningDelta d = p.finish();
  all.reasoning += d.reasoning;
  all.content += d.content;
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = markup::from_literal(std::string_view(reinterpret_cast<const char*>(data), size));
  const std::string_view text = input;
  size = text.size();
  // Split points derived from the input so that the fuzzer explores them too.
  const size_t a = size ? data[0] % (size + 1) : 0;
  const size_t b =
      a + (size > a ? (size > 1 ? static_cast<uint8_t>(text[size - 1]) : 0) % (size - a + 1) : 0);
  const std::vector<std::string_view> three = {text.substr(0, a), text.substr(a, b - a), text.substr(b)};
  std::vector<std::string_view> bytes;
  if (size <= 512)
    for (size_t i = 0; i < size; ++i) bytes.push_back(text.substr(i, 1));

  try {
    const Outcome w = outcome_of(parse_tool_calls(text), text);
    if (w.content.size() > size) die("tool parser invented content");
    if (stream_tools(three, text) != w) die("tool streaming (3 chunks) != non-streaming");
    if (!bytes.empty() && stream_tools(bytes, text) != w)
      die("tool streaming (1-byte chunks) != non-streaming");
  } catch (const Error&) {
  }

  try {
    const Json j = gemma4_args_to_json(text);
    if (!j.is_object()) die("gemma4_args_to_json returned a non-object");
    (void)gemma4_dump_json(j);
  } catch (const Error&) {
  }

  for (bool thinking : {true, false}) {
    for (bool opened : {false, true}) {
      try {
        const ReasoningDelta whole = parse_reasoning(text, thinking, opened);
        if (whole.reasoning.size() + whole.content.size() > size) die("reasoning parser invented text");
        const ReasoningDelta s = stream_reasoning(three, thinking, opened);
        if (s.reasoning != whole.reasoning || s.content != whole.content) die("reasoning streaming != non-streaming");
        if (!bytes.empty()) {
          const ReasoningDelta t = stream_reasoning(bytes, thinking, opened);
          if (t.reasoning != whole.reasoning || t.content != whole.content) die("reasoning 1-byte streaming differs");
        }
      } catch (const Error&) {
      }
    }
  }
  return 0;
}
