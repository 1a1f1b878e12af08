#pragma once
// Streaming == non-streaming checks for the reasoning and tool-call parsers: a text is fed split at
// every byte position, in 1-byte chunks and (for short texts) in every 3-piece split, and each result
// must equal the non-streaming parse of the whole text.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/reasoning_parser.h"
#include "text/tool_parser.h"

namespace dgemma::testing {

// Every way of cutting text into pieces that the checks use.
inline std::vector<std::vector<std::string_view>> all_splits(std::string_view text, size_t three_way_limit = 96) {
  std::vector<std::vector<std::string_view>> out;
  const size_t n = text.size();
  for (size_t i = 0; i <= n; ++i) out.push_back({text.substr(0, i), text.substr(i)});
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < n; ++i) bytes.push_back(text.substr(i, 1));
  out.push_back(bytes);
  if (n <= three_way_limit)
    for (size_t i = 1; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j) out.push_back({text.substr(0, i), text.substr(i, j - i), text.substr(j)});
  return out;
}

struct ToolOutcome {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments JSON
  bool operator==(const ToolOutcome&) const = default;
};

inline void PrintTo(const ToolOutcome& o, std::ostream* os) {
  *os << "content=\"" << o.content << "\" calls=[";
  for (const auto& [n, a] : o.calls) *os << n << a << "; ";
  *os << "]";
}

inline ToolOutcome outcome_of(const ToolParseResult& r) {
  ToolOutcome o{r.content, {}};
  for (const ToolCall& c : r.calls) o.calls.emplace_back(c.name, c.arguments_json);
  return o;
}

// Feeds the pieces to a streaming parser and checks the delta protocol on the way: a call's first
// delta has its id and name, later ones neither, indices appear in order, no delta is empty.
inline ToolOutcome stream_tool_calls(const std::vector<std::string_view>& pieces) {
  ToolCallParser parser;
  ToolOutcome o;
  const auto absorb = [&](const ToolCallParser::Delta& d) {
    o.content += d.content;
    for (const ToolCallDelta& c : d.calls) {
      if (c.index == static_cast<int>(o.calls.size())) {
        EXPECT_EQ(c.id.substr(0, 5), "call_");
        EXPECT_EQ(c.id.size(), 29u);
        EXPECT_FALSE(c.name.empty());
        o.calls.emplace_back(c.name, c.arguments_delta);
      } else {
        EXPECT_EQ(c.index, static_cast<int>(o.calls.size()) - 1) << "deltas must be for the newest call";
        EXPECT_TRUE(c.id.empty());
        EXPECT_TRUE(c.name.empty());
        EXPECT_FALSE(c.arguments_delta.empty());
        if (!o.calls.empty()) o.calls.back().second += c.arguments_delta;
      }
    }
  };
  for (std::string_view p : pieces) absorb(parser.feed(p));
  absorb(parser.finish());
  EXPECT_EQ(parser.saw_tool_call(), !o.calls.empty());
  return o;
}

inline void expect_tool_split_equivalence(std::string_view text) {
  const ToolOutcome whole = outcome_of(parse_tool_calls(text));
  for (const auto& pieces : all_splits(text)) {
    const ToolOutcome got = stream_tool_calls(pieces);
    if (got != whole) {
      std::string desc;
      for (std::string_view p : pieces) desc += "[" + std::string(p) + "]";
      ADD_FAILURE() << "streaming differs for split " << desc;
      return;
    }
  }
}

inline ReasoningDelta stream_reasoning(const std::vector<std::string_view>& pieces, bool thinking,
                                       bool starts_in_reasoning) {
  ReasoningParser parser(thinking, starts_in_reasoning);
  ReasoningDelta all;
  for (std::string_view p : pieces) {
    ReasoningDelta d = parser.feed(p);
    all.reasoning += d.reasoning;
    all.content += d.content;
  }
  ReasoningDelta d = parser.finish();
  all.reasoning += d.reasoning;
  all.content += d.content;
  return all;
}

inline void expect_reasoning_split_equivalence(std::string_view text, bool thinking, bool starts_in_reasoning = false) {
  const ReasoningDelta whole = parse_reasoning(text, thinking, starts_in_reasoning);
  for (const auto& pieces : all_splits(text)) {
    const ReasoningDelta got = stream_reasoning(pieces, thinking, starts_in_reasoning);
    if (got.reasoning != whole.reasoning || got.content != whole.content) {
      std::string desc;
      for (std::string_view p : pieces) desc += "[" + std::string(p) + "]";
      ADD_FAILURE() << "streaming differs for split " << desc << ": reasoning \"" << got.reasoning
                    << "\" vs \"" << whole.reasoning << "\", content \"" << got.content << "\" vs \""
                    << whole.content << "\"";
      return;
    }
  }
}

}  // namespace dgemma::testing
