#pragma once
// Small helpers shared by the reasoning and tool-call parsers: the Gemma 4 control strings as they
// appear in detokenized text, prefix matching for markers that may straddle streaming deltas, and
// UTF-8 handling (a delta never ends inside a multi-byte character; JSON text is always valid UTF-8).
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace dgemma::markup {

inline constexpr std::string_view kToolCallStart = "<|tool_call>";
inline constexpr std::string_view kToolCallEnd = "<tool_call|>";
inline constexpr std::string_view kToolResponse = "<|tool_response>";
inline constexpr std::string_view kStringDelim = "<|\"|>";
inline constexpr std::string_view kChannelOpen = "<|channel>";
inline constexpr std::string_view kChannelClose = "<channel|>";
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kThoughtLabel = "thought";

inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

enum class Match { kNone, kFull, kPartial };

// kFull: text[pos..] starts with marker. kPartial: text[pos..] runs to the end of text and is a
// non-empty proper prefix of marker (more text may complete it). kNone otherwise.
Match match_at(std::string_view text, size_t pos, std::string_view marker);

// The strongest match of any marker at pos (kFull beats kPartial); `which` gets the full match.
Match match_any(std::string_view text, size_t pos, std::initializer_list<std::string_view> markers,
                std::string_view* which = nullptr);

// First position >= from where one of markers matches fully, or where a partial match reaches the end
// of text; text.size() if none. `result` gets the kind, `which` the marker for kFull.
size_t find_marker(std::string_view text, size_t from, std::initializer_list<std::string_view> markers,
                   Match* result, std::string_view* which = nullptr);

// Length of the UTF-8 sequence starting at s[i]: >0 if a complete valid sequence, 0 if a valid but
// incomplete prefix that reaches the end of s, -1 if invalid (overlongs, surrogates, > U+10FFFF,
// stray continuation bytes).
int utf8_sequence(std::string_view s, size_t i);

// Bytes at the end of s that form a valid but incomplete UTF-8 sequence (0..3): held back from a delta.
size_t utf8_incomplete_tail(std::string_view s);

// Appends raw as the body of a JSON string (no quotes), escaping like Python's
// json.dumps(ensure_ascii=False): '"', '\\', \b \f \n \r \t, other C0 controls as \u00XX; everything
// else, including non-ASCII, verbatim. Invalid UTF-8 becomes U+FFFD. If !final, a trailing incomplete
// sequence is not consumed. Returns the number of bytes of raw consumed.
size_t append_json_escaped(std::string& out, std::string_view raw, bool final);

// "\"...\"" for raw (final).
std::string json_quote(std::string_view raw);

// Appends the UTF-8 encoding of code point cp (cp must be a scalar value).
void append_utf8(std::string& out, unsigned cp);

}  // namespace dgemma::markup
