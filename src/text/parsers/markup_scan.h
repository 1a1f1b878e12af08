#pragma once
// Small helpers shared by the reasoning and tool-call parsers: the Gemma 4 markup as it appears in
// markup text, prefix matching for markers that may straddle streaming deltas, and UTF-8 handling (a
// delta never ends inside a multi-byte character; JSON text is always valid UTF-8).
//
// Markup text is model output as the parsers read it (text/tokenizer/detokenizer.h builds it from token
// ids): ordinary text as UTF-8, and each Gemma 4 markup token the parsers act on as one reserved byte
// 0xF8..0xFD, a byte valid UTF-8 never holds. So a markup token is recognised by its id, never by
// text that happens to spell it, and a marker can never be cut in two. render() turns what the
// parsers leave over into client text.
#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace dgemma::markup {

// The markup tokens, as markup text holds them.
inline constexpr std::string_view kChannelOpen = "\xF8";    // <|channel>
inline constexpr std::string_view kChannelClose = "\xF9";   // <channel|>
inline constexpr std::string_view kToolCallStart = "\xFA";  // <|tool_call>
inline constexpr std::string_view kToolCallEnd = "\xFB";    // <tool_call|>
inline constexpr std::string_view kToolResponse = "\xFC";   // <|tool_response>
inline constexpr std::string_view kStringDelim = "\xFD";    // <|"|>

struct MarkupToken {
  std::string_view code;     // the byte in markup text
  std::string_view literal;  // the token's text in the vocabulary
};
inline constexpr std::array<MarkupToken, 6> kMarkupTokens = {{{kChannelOpen, "<|channel>"},
                                                              {kChannelClose, "<channel|>"},
                                                              {kToolCallStart, "<|tool_call>"},
                                                              {kToolCallEnd, "<tool_call|>"},
                                                              {kToolResponse, "<|tool_response>"},
                                                              {kStringDelim, "<|\"|>"}}};

// Plain-text markers (ordinary tokens, matched as text).
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kThoughtLabel = "thought";

inline bool is_markup_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0xF8 && u <= 0xFD;
}

// Client text from markup text: each markup byte dropped (keep_literal false: skip_special_tokens) or
// written as its token's text.
std::string render(std::string_view markup_text, bool keep_literal);

// Markup text from text that spells the markup tokens literally ("<|tool_call>call:f{}<tool_call|>"):
// how tests and the fuzz corpus write model output.
std::string from_literal(std::string_view text);

inline bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

enum class Match { kNone, kFull, kPartial };

// kFull: text[pos..] starts with marker. kPartial: text[pos..] runs to the end of text and is a
// non-empty proper prefix of marker (more text may complete it). kNone otherwise.
Match match_at(std::string_view text, size_t pos, std::string_view marker);

// The strongest match of any marker at pos (kFull beats kPartial); `which` gets the full match.
Match match_any(std::string_view text, size_t pos, std::initializer_list<std::string_view> markers,
                std::string_view* which = nullptr);

// First position >= from where one of markers matches fully, or where a partial match reaches the end
// of text; text.size() if none. `result` gets the kind, `which` the marker for kFull. Every marker
// starts with '<' or is a markup byte.
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
// else, including non-ASCII, verbatim. Markup bytes are dropped; other invalid UTF-8 becomes U+FFFD.
// If !final, a trailing incomplete sequence is not consumed. Returns the number of bytes of raw consumed.
size_t append_json_escaped(std::string& out, std::string_view raw, bool final);

// "\"...\"" for raw (final).
std::string json_quote(std::string_view raw);

// Appends the UTF-8 encoding of code point cp (cp must be a scalar value).
void append_utf8(std::string& out, unsigned cp);

}  // namespace dgemma::markup
