#pragma once
// Streaming == non-streaming checks for the reasoning and tool-call parsers: a markup text is fed split
// at every byte position, in 1-byte chunks and (for short texts) in every 3-piece split, and each
// result must equal the non-streaming parse of the whole text.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/parsers/markup_scan.h"
#include "text/parsers/reasoning_parser.h"
#include "text/parsers/tool_parser.h"

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
  std::string content;                                     // markup spelled out
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments JSON
  std::vector<std::string> untrusted;  // calls whose arguments are not complete: their text
  bool operator==(const ToolOutcome&) const = default;
};

inline void PrintTo(const ToolOutcome& o, std::ostream* os) {
  *os << "content=\"" << o.content << "\" calls=[";
  for (const auto& [n, a] : o.calls) *os << n << a << "; ";
  *os << "] untrusted=[";
  for (const auto& t : o.untrusted) *os << t << "; ";
  *os << "]";
}

// The outcome with the markup spelled out; each call's text and stray text are checked to lie in the
// markup text it came from.
inline ToolOutcome outcome_of(const ToolParseResult& r) {
  ToolOutcome o{markup::render(r.content, true), {}, {}};
  size_t last = 0;
  for (const ParsedToolCall& c : r.calls) {
    if (c.arguments != ParsedToolCall::Arguments::kNoBody) {
      EXPECT_FALSE(c.name.empty());
    }
    EXPECT_EQ(c.text.substr(0, markup::kToolCallStart.size()), markup::kToolCallStart);
    EXPECT_NE(c.text.find(c.stray), std::string::npos);
    EXPECT_GE(c.content_offset, last);
    EXPECT_LE(c.content_offset, r.content.size());
    last = c.content_offset;
    if (c.arguments == ParsedToolCall::Arguments::kComplete)
      o.calls.emplace_back(c.name, c.arguments_json);
    else
      o.untrusted.push_back(markup::render(c.text, true));
  }
  return o;
}

// Feeds the pieces to a streaming parser and merges its deltas as parse_tool_calls does.
inline ToolOutcome stream_tool_calls(const std::vector<std::string_view>& pieces) {
  ToolCallParser parser;
  ToolParseResult all;
  const auto absorb = [&](ToolCallParser::Delta&& d) {
    for (ParsedToolCall& c : d.calls) {
      c.content_offset += all.content.size();
      all.calls.push_back(std::move(c));
    }
    all.content += d.content;
  };
  for (std::string_view p : pieces) absorb(parser.feed(p));
  absorb(parser.finish());
  EXPECT_EQ(parser.saw_tool_call(), !all.calls.empty());
  return outcome_of(all);
}

// `text` is markup text.
inline void expect_tool_split_equivalence(std::string_view text) {
  const ToolOutcome whole = outcome_of(parse_tool_calls(text));
  for (const auto& pieces : all_splits(text)) {
    const ToolOutcome got = stream_tool_calls(pieces);
    if (got != whole) {
      std::string desc;
      for (std::string_view p : pieces) desc += "[" + markup::render(p, true) + "]";
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
      ADD_FAILURE() << "streaming differs for split " << markup::render(desc, true) << ": reasoning \""
                    << got.reasoning << "\" vs \"" << whole.reasoning << "\", content \"" << got.content
                    << "\" vs \"" << whole.content << "\"";
      return;
    }
  }
}

}  // namespace dgemma::testing
