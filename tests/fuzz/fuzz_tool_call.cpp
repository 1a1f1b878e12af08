// Fuzz target for the text-layer output parsers: parse_tool_calls, the streaming ToolCallParser,
// gemma4_args_to_json and the reasoning parser (all modes). Bad input may raise dgemma::Error; anything
// else (a crash, a hang, another exception) is a bug. Invariants checked, abort() on violation:
//  - streaming in 3 chunks (and in 1-byte chunks for short inputs) == non-streaming;
//  - every call's arguments are a valid JSON object (valid UTF-8 included);
//  - the parsers never invent text: output sizes are bounded by the input size.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/gemma4_args.h"
#include "text/reasoning_parser.h"
#include "text/tool_parser.h"
#include "util/error.h"

namespace {

using namespace dgemma;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "fuzz_tool_call: invariant violated: %s\n", what);
  std::abort();
}

struct Outcome {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;
  bool operator==(const Outcome&) const = default;
};

Outcome stream_tools(const std::vector<std::string_view>& pieces) {
  ToolCallParser p;
  Outcome o;
  const auto absorb = [&](const ToolCallParser::Delta& d) {
    o.content += d.content;
    for (const ToolCallDelta& c : d.calls) {
      if (c.index == static_cast<int>(o.calls.size())) {
        if (c.name.empty() || c.id.empty()) die("first call delta without id/name");
        o.calls.emplace_back(c.name, c.arguments_delta);
      } else if (c.index + 1 == static_cast<int>(o.calls.size())) {
        o.calls.back().second += c.arguments_delta;
      } else {
        die("call delta out of order");
      }
    }
  };
  for (std::string_view piece : pieces) absorb(p.feed(piece));
  absorb(p.finish());
  if (p.saw_tool_call() != !o.calls.empty()) die("saw_tool_call");
  return o;
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
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // Split points derived from the input so that the fuzzer explores them too.
  const size_t a = size ? data[0] % (size + 1) : 0;
  const size_t b = a + (size > a ? (size > 1 ? data[size - 1] : 0) % (size - a + 1) : 0);
  const std::vector<std::string_view> three = {text.substr(0, a), text.substr(a, b - a), text.substr(b)};
  std::vector<std::string_view> bytes;
  if (size <= 512)
    for (size_t i = 0; i < size; ++i) bytes.push_back(text.substr(i, 1));

  try {
    const ToolParseResult whole = parse_tool_calls(text);
    Outcome w{whole.content, {}};
    for (const ToolCall& c : whole.calls) {
      const auto j = nlohmann::json::parse(c.arguments_json, nullptr, false);
      if (j.is_discarded() || !j.is_object()) die("arguments are not a JSON object");
      w.calls.emplace_back(c.name, c.arguments_json);
    }
    if (w.content.size() > size) die("tool parser invented content");
    if (stream_tools(three) != w) die("tool streaming (3 chunks) != non-streaming");
    if (!bytes.empty() && stream_tools(bytes) != w) die("tool streaming (1-byte chunks) != non-streaming");
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
