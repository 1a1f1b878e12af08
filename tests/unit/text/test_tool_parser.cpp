// Gemma 4 tool-call parsing: the native format, the malformed forms DiffusionGemma emits,
// lossless handling of unparseable text, and streaming == non-streaming for every split. Inputs are
// written with the markup spelled out and turned into markup text (markup::from_literal).
#include <gtest/gtest.h>

#include <string>

#include "parser_split_check.h"
#include "text/parsers/gemma4_args.h"
#include "text/parsers/markup_scan.h"
#include "text/parsers/tool_parser.h"
#include "util/error.h"
#include "util/json.h"

namespace dgemma {
namespace {

using testing::expect_tool_split_equivalence;
using testing::outcome_of;
using testing::ToolOutcome;

using markup::from_literal;

// Parses text (markup spelled out), checks every call's arguments are a JSON object, the streaming
// equivalence, and returns the outcome.
ToolOutcome parse_checked(std::string_view literal) {
  const std::string text = from_literal(literal);
  const ToolParseResult r = parse_tool_calls(text);
  for (const ParsedToolCall& c : r.calls) {
    Json j = Json::parse(c.arguments_json);  // throws (fails the test) on invalid JSON
    EXPECT_TRUE(j.is_object()) << c.arguments_json;
  }
  expect_tool_split_equivalence(text);
  return outcome_of(r);
}

ToolOutcome calls(std::string content, std::vector<std::pair<std::string, std::string>> c,
                  std::vector<std::string> untrusted = {}) {
  return {std::move(content), std::move(c), std::move(untrusted)};
}

Json args_json(std::string_view literal) {
  return gemma4_args_to_json(from_literal(literal));
}

TEST(ToolParser, NativeCall) {
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:get_weather{location:<|"|>Paris<|"|>,unit:<|"|>celsius<|"|>}<tool_call|>)x"),
            calls("", {{"get_weather", R"({"location": "Paris", "unit": "celsius"})"}}));
}

// The opening a forced call is pinned with, followed by what the model writes, parses as that call;
// an opening with nothing after it (no room left) is a call without arguments.
TEST(ToolParser, ForcedOpeningsParse) {
  EXPECT_EQ(tool_call_opening(""), "<|tool_call>call:");
  EXPECT_EQ(tool_call_opening("get_weather"), "<|tool_call>call:get_weather{");
  auto r = parse_tool_calls(
      from_literal(tool_call_opening("get_weather") + "city:<|\"|>Paris<|\"|>}<tool_call|>"));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments_json, "{\"city\": \"Paris\"}");
  EXPECT_EQ(r.calls[0].arguments, ParsedToolCall::Arguments::kComplete);
  EXPECT_EQ(r.content, "");
  // No room left after the opening: an empty body, nothing truncated.
  r = parse_tool_calls(from_literal(tool_call_opening("get_time")));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments_json, "{}");
  EXPECT_EQ(r.calls[0].arguments, ParsedToolCall::Arguments::kComplete);
  r = parse_tool_calls(from_literal(tool_call_opening("") + "get_time{}<tool_call|>"));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_time");
}

TEST(ToolParser, NoToolCallIsAllContent) {
  EXPECT_EQ(parse_checked("Just an answer, with {braces} and <tags> and a < sign."),
            calls("Just an answer, with {braces} and <tags> and a < sign.", {}));
  EXPECT_EQ(parse_checked(""), calls("", {}));
}

TEST(ToolParser, NamesWithDotsDashesDigits) {
  EXPECT_EQ(parse_checked("<|tool_call>call:module.get-weather_v2{}<tool_call|>"),
            calls("", {{"module.get-weather_v2", "{}"}}));
}

TEST(ToolParser, NestedObjectsAndArrays) {
  EXPECT_EQ(
      parse_checked(R"x(<|tool_call>call:f{a:{b:[1,2,{c:<|"|>x<|"|>}],d:{}},e:[],g:[[<|"|>p<|"|>,[true]],null]}<tool_call|>)x"),
      calls("", {{"f", R"({"a": {"b": [1, 2, {"c": "x"}], "d": {}}, "e": [], "g": [["p", [true]], null]})"}}));
}

TEST(ToolParser, StringsAreRawBetweenDelimitersAndEscapedInJson) {
  // Quotes, backslashes, a real newline and tab, braces and commas inside a <|"|> string.
  EXPECT_EQ(parse_checked("<|tool_call>call:f{q:<|\"|>say \"hi\", C:\\dir {x}\nnext\tcol<|\"|>}<tool_call|>"),
            calls("", {{"f", R"({"q": "say \"hi\", C:\\dir {x}\nnext\tcol"})"}}));
  // Non-ASCII is kept as is (json.dumps(ensure_ascii=False)); control characters become \u00XX.
  EXPECT_EQ(parse_checked("<|tool_call>call:f{city:<|\"|>Zürich 日本 😀<|\"|>,c:<|\"|>\x01\x1f\x7f<|\"|>}<tool_call|>"),
            calls("", {{"f", "{\"city\": \"Zürich 日本 😀\", \"c\": \"\\u0001\\u001f\x7f\"}"}}));
  // A lone '<' and partial delimiters inside a string are text.
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:f{q:<|"|>a < b <| c <|" d<|"|>}<tool_call|>)x"),
            calls("", {{"f", R"({"q": "a < b <| c <|\" d"})"}}));
}

TEST(ToolParser, Numbers) {
  EXPECT_EQ(
      parse_checked("<|tool_call>call:f{a:42,b:-7,c:3.14,d:-0.5,e:1e10,f:2.5E-3,g:+5,h:.5,i:5.,j:0,k:-0,"
                    "l:12345678901234567890}<tool_call|>"),
      calls("", {{"f", R"({"a": 42, "b": -7, "c": 3.14, "d": -0.5, "e": 1e10, "f": 2.5E-3, "g": 5, "h": 0.5, "i": 5.0, "j": 0, "k": -0, "l": 12345678901234567890})"}}));
  // Not numbers: kept as strings, nothing reinterpreted.
  EXPECT_EQ(parse_checked("<|tool_call>call:f{zip:007,hex:0x1F,u:1_000,n:nan,i:inf,v:1.2.3,e:1e}<tool_call|>"),
            calls("", {{"f", R"({"zip": "007", "hex": "0x1F", "u": "1_000", "n": "nan", "i": "inf", "v": "1.2.3", "e": "1e"})"}}));
}

TEST(ToolParser, LiteralsAndBareWords) {
  EXPECT_EQ(parse_checked("<|tool_call>call:f{t:true,f:false,n:null,T:True,F:False,N:None,w:hello world , e:}<tool_call|>"),
            calls("", {{"f", R"({"t": true, "f": false, "n": null, "T": true, "F": false, "N": null, "w": "hello world", "e": ""})"}}));
}

TEST(ToolParser, EmptyArguments) {
  EXPECT_EQ(parse_checked("<|tool_call>call:f{}<tool_call|>"), calls("", {{"f", "{}"}}));
  EXPECT_EQ(parse_checked("<|tool_call>call:f()<tool_call|>"), calls("", {{"f", "{}"}}));
  EXPECT_EQ(parse_checked("<|tool_call>call:get_time<tool_call|>"), calls("", {{"get_time", "{}"}}));
  EXPECT_EQ(parse_checked("<|tool_call>call:f{ \n }<tool_call|>"), calls("", {{"f", "{}"}}));
}

TEST(ToolParser, SeveralCallsAndContentBefore) {
  const std::string text =
      "Let me check both cities.\n<|tool_call>call:get_weather{location:<|\"|>Paris<|\"|>}<tool_call|>"
      "<|tool_call>call:get_weather{location:<|\"|>Tokyo<|\"|>}<tool_call|>\n<|tool_call>call:noop{}<tool_call|>";
  EXPECT_EQ(parse_checked(text), calls("Let me check both cities.\n", {{"get_weather", R"({"location": "Paris"})"},
                                                                       {"get_weather", R"({"location": "Tokyo"})"},
                                                                       {"noop", "{}"}}));
  // Whitespace around and between calls is not content; text between calls is.
  EXPECT_EQ(parse_checked("  \n<|tool_call>call:a{}<tool_call|> and <|tool_call>call:b{}<tool_call|>\n\n"),
            calls(" and ", {{"a", "{}"}, {"b", "{}"}}));
  // Each call records where it sits in the content and its own text.
  const ToolParseResult r =
      parse_tool_calls(from_literal("A<|tool_call>call:a{}<tool_call|>B<|tool_call>call:b{}<tool_call|>"));
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "AB");
  EXPECT_EQ(r.calls[0].content_offset, 1u);
  EXPECT_EQ(r.calls[1].content_offset, 2u);
  EXPECT_EQ(markup::render(r.calls[1].text, true), "<|tool_call>call:b{}<tool_call|>");
}

TEST(ToolParser, TrailingToolResponseDropped) {
  EXPECT_EQ(parse_checked("<|tool_call>call:f{a:1}<tool_call|><|tool_response>"), calls("", {{"f", R"({"a": 1})"}}));
  EXPECT_EQ(parse_checked("Done.<|tool_response>\n"), calls("Done.", {}));
  // Not trailing: it stays.
  EXPECT_EQ(parse_checked("a<|tool_response>b"), calls("a<|tool_response>b", {}));
}

TEST(ToolParser, ParenPythonBodies) {
  EXPECT_EQ(parse_checked("<|tool_call>call:search(domain='example.com', n=3, exact=True)<tool_call|>"),
            calls("", {{"search", R"({"domain": "example.com", "n": 3, "exact": true})"}}));
  EXPECT_EQ(parse_checked("<|tool_call>call:f(q=\"it's \\\"x\\\"\", opts={a: 1})<tool_call|>"),
            calls("", {{"f", R"({"q": "it's \"x\"", "opts": {"a": 1}})"}}));
}

TEST(ToolParser, JsonQuotesEqualsAndSingleQuotes) {
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:get_weather{"city":"Paris","days":3}<tool_call|>)x"),
            calls("", {{"get_weather", R"({"city": "Paris", "days": 3})"}}));
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:get_weather{city:"Paris"}<tool_call|>)x"),
            calls("", {{"get_weather", R"({"city": "Paris"})"}}));
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:f{city=<|"|>Paris<|"|>, n = 2}<tool_call|>)x"),
            calls("", {{"f", R"({"city": "Paris", "n": 2})"}}));
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:f{'city': 'Paris', <|"|>k<|"|>:1}<tool_call|>)x"),
            calls("", {{"f", R"({"city": "Paris", "k": 1})"}}));
  // JSON escapes in quoted strings are decoded, surrogate pairs combined, lone surrogates replaced.
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:f{s:"a\"b\\c\n\u00e9\ud83d\ude00\/", t:"\ud800x", u:"\q"}<tool_call|>)x"),
            calls("", {{"f", "{\"s\": \"a\\\"b\\\\c\\né😀/\", \"t\": \"\xEF\xBF\xBDx\", \"u\": \"\\\\q\"}"}}));
}

TEST(ToolParser, DelimiterLeakedIntoQuotedString) {
  // Seen in deep agent sessions (club-3090 tool-parser overlay notes): the <|"|> token inside a
  // plain-quoted value. It is never text: dropped.
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:mcp{server:"<|"|>music-assistant-mcp<|"|>", d:'<|"|>'}<tool_call|>)x"),
            calls("", {{"mcp", R"({"server": "music-assistant-mcp", "d": ""})"}}));
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:ha_list_entities(domain='media_player')<tool_call|>)x"),
            calls("", {{"ha_list_entities", R"({"domain": "media_player"})"}}));
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:f(args={"a": [1, "b"]}, n:2)<tool_call|>)x"),
            calls("", {{"f", R"({"args": {"a": [1, "b"]}, "n": 2})"}}));
}

TEST(ToolParser, LenientStructure) {
  // Missing and extra commas, a trailing comma, an outer bracket closing an unclosed inner array.
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:f{a:<|"|>x<|"|> b:<|"|>y<|"|>,,c:[1,,2,],}<tool_call|>)x"),
            calls("", {{"f", R"({"a": "x", "b": "y", "c": [1, 2]})"}}));
  EXPECT_EQ(parse_checked("<|tool_call>call:f{a:[1,2}<tool_call|>"), calls("", {{"f", R"({"a": [1, 2]})"}}));
  // Stray closing brackets after the body are dropped.
  EXPECT_EQ(parse_checked("<|tool_call>call:f{a:{b:1}}}<tool_call|>"), calls("", {{"f", R"({"a": {"b": 1}})"}}));
  // Whitespace inside the header.
  EXPECT_EQ(parse_checked("<|tool_call> call : f {a:1}\n<tool_call|>"), calls("", {{"f", R"({"a": 1})"}}));
  // "call:" missing.
  EXPECT_EQ(parse_checked("<|tool_call>get_weather{a:1}<tool_call|>"), calls("", {{"get_weather", R"({"a": 1})"}}));
}

TEST(ToolParser, MissingCloserRecovered) {
  EXPECT_EQ(parse_checked("<|tool_call>call:f{a:1}"), calls("", {{"f", R"({"a": 1})"}}));
  EXPECT_EQ(parse_checked("<|tool_call>call:f{a:1}\n"), calls("", {{"f", R"({"a": 1})"}}));
  // The next call ends the previous one.
  EXPECT_EQ(parse_checked("<|tool_call>call:f{a:1}<|tool_call>call:g{b:2}<tool_call|>"),
            calls("", {{"f", R"({"a": 1})"}, {"g", R"({"b": 2})"}}));
  // A body cut short by the closer: what is open gets closed.
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:f{a:<|"|>abc<tool_call|>after)x"), calls("after", {{"f", R"({"a": "abc"})"}}));
  // Cut short by the end of the output (max_tokens): the values may be truncated, so the call is untrusted.
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:f{a:[1,{b:<|"|>x)x"),
            calls("", {}, {R"x(<|tool_call>call:f{a:[1,{b:<|"|>x)x"}));
  EXPECT_EQ(parse_checked("<|tool_call>call:f{a:"), calls("", {}, {"<|tool_call>call:f{a:"}));
  const ToolParseResult r = parse_tool_calls(from_literal("<|tool_call>call:f{a:"));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, ParsedToolCall::Arguments::kCutShort);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"a": ""})");
}

TEST(ToolParser, UnparseableTextStaysWithItsCall) {
  // Not a call header: a call without a body, whose text runs to where a call's would end.
  EXPECT_EQ(parse_checked("<|tool_call>hello there"), calls("", {}, {"<|tool_call>hello there"}));
  EXPECT_EQ(parse_checked("<|tool_call>call:get_wea"), calls("", {}, {"<|tool_call>call:get_wea"}));
  EXPECT_EQ(parse_checked("x <|tool_call>call:f[1]<tool_call|> y"),
            calls("x  y", {}, {"<|tool_call>call:f[1]<tool_call|>"}));
  EXPECT_EQ(parse_checked("<|tool_call>"), calls("", {}, {"<|tool_call>"}));
  EXPECT_EQ(parse_checked("a <tool_call|> b"), calls("a <tool_call|> b", {}));
  const std::string long_name = "<|tool_call>call:" + std::string(300, 'n') + "{}<tool_call|>";
  EXPECT_EQ(parse_checked(long_name), calls("", {}, {long_name}));
  ToolParseResult r =
      parse_tool_calls(from_literal("<|tool_call>call:calculateather:city:Paris}<tool_call|>"));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, ParsedToolCall::Arguments::kNoBody);
  EXPECT_EQ(r.calls[0].name, "calculateather");
  EXPECT_EQ(r.calls[0].arguments_json, "{}");
  // A syntax error inside a body: the call is untrusted (its JSON holds the members before the error),
  // and its whole text is kept with it.
  EXPECT_EQ(parse_checked("<|tool_call>call:f{a:1, ]b:2}<tool_call|>tail"),
            calls("tail", {}, {"<|tool_call>call:f{a:1, ]b:2}<tool_call|>"}));
  EXPECT_EQ(parse_checked("<|tool_call>call:f{a:1, key without value}<tool_call|>"),
            calls("", {}, {"<|tool_call>call:f{a:1, key without value}<tool_call|>"}));
  EXPECT_EQ(parse_checked(R"x(<|tool_call>call:f{<|"|>k<|"|> 5}<tool_call|>)x"),
            calls("", {}, {R"x(<|tool_call>call:f{<|"|>k<|"|> 5}<tool_call|>)x"}));
  r = parse_tool_calls(from_literal("<|tool_call>call:f{a:1, ]b:2}<tool_call|>"));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, ParsedToolCall::Arguments::kMalformed);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"a": 1})");
  // Text after the body before the closer is the call's stray text.
  EXPECT_EQ(parse_checked("<|tool_call>call:f{a:1} oops<tool_call|>"), calls("", {{"f", R"({"a": 1})"}}));
  r = parse_tool_calls(from_literal("<|tool_call>call:f{a:1} oops<tool_call|>"));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].stray, "oops");
  // A valid call after garbage is still found.
  EXPECT_EQ(parse_checked("<|tool_call>nope <|tool_call>call:g{}<tool_call|>"),
            calls("", {{"g", "{}"}}, {"<|tool_call>nope "}));
}

TEST(ToolParser, DepthLimit) {
  std::string deep = "<|tool_call>call:f{a:";
  for (int i = 0; i < 40; ++i) deep += "[";
  deep += "1<tool_call|>";
  const ToolOutcome o = parse_checked(deep);
  // The outer object and 31 arrays make kMaxDepth (32) containers; the 32nd '[' is the error point: the
  // call is untrusted and keeps what is open (closed).
  EXPECT_EQ(o, calls("", {}, {deep}));
  EXPECT_EQ(Gemma4ArgsStream::kMaxDepth, 32u);
  const ToolParseResult r = parse_tool_calls(from_literal(deep));
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"a": )" + std::string(31, '[') + std::string(31, ']') + "}");
}

TEST(ToolParser, InvalidUtf8BecomesReplacementCharacter) {
  const ToolOutcome o = parse_checked("<|tool_call>call:f{s:<|\"|>a\xC3(\xE2\x82 b\xFF<|\"|>}<tool_call|>");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].second, "{\"s\": \"a\xEF\xBF\xBD(\xEF\xBF\xBD\xEF\xBF\xBD b\xEF\xBF\xBD\"}");
}

TEST(ToolParser, StreamingEmitsContentAtOnceAndCallsWhole) {
  ToolCallParser p;
  ToolCallParser::Delta d = p.feed(from_literal("Checking. <|tool_call>call:get_weather{location:<|\"|>Par"));
  EXPECT_EQ(d.content, "Checking. ");
  EXPECT_TRUE(d.calls.empty());
  EXPECT_FALSE(p.saw_tool_call());
  d = p.feed(from_literal("is, France<|\"|>,days:1"));
  EXPECT_EQ(d.content, "");
  EXPECT_TRUE(d.calls.empty());
  d = p.feed(from_literal("0}<tool_call|> and <|tool_call>call:g{}"));
  EXPECT_EQ(d.content, " and ");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "get_weather");
  EXPECT_EQ(d.calls[0].arguments_json, R"({"location": "Paris, France", "days": 10})");
  EXPECT_EQ(d.calls[0].content_offset, 0u);
  EXPECT_TRUE(p.saw_tool_call());
  d = p.finish();  // "g{}" ended by the end of the output: its body was closed by its own bracket
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "g");
  EXPECT_EQ(d.calls[0].arguments, ParsedToolCall::Arguments::kComplete);
}

TEST(ToolParser, StreamingNeverLeaksMarkup) {
  const std::string text = from_literal("Sure<|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|>");
  ToolCallParser p;
  std::string content;
  for (char c : text) {
    content += p.feed(std::string_view(&c, 1)).content;
    for (char k : content) EXPECT_FALSE(markup::is_markup_byte(k)) << content;
  }
  content += p.finish().content;
  EXPECT_EQ(content, "Sure");
}

TEST(ToolParser, StreamingHoldsIncompleteUtf8) {
  ToolCallParser p;
  EXPECT_EQ(p.feed("caf\xC3").content, "caf");
  EXPECT_EQ(p.feed("\xA9!").content, "\xC3\xA9!");
  EXPECT_EQ(p.finish().content, "");
}

// Markup is found by token, never by text that spells it: a literal "<|tool_call>" is ordinary text.
TEST(ToolParser, SpelledOutMarkupIsText) {
  const ToolParseResult r = parse_tool_calls("<|tool_call>call:f{a:1}<tool_call|>");
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "<|tool_call>call:f{a:1}<tool_call|>");
}

TEST(ToolParser, ParserIsMovable) {
  ToolCallParser a;
  EXPECT_TRUE(a.feed(from_literal("<|tool_call>call:f{x:1")).calls.empty());
  ToolCallParser b = std::move(a);
  const ToolCallParser::Delta d = b.finish();
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments_json, R"({"x": 1})");
  EXPECT_EQ(d.calls[0].arguments, ParsedToolCall::Arguments::kCutShort);
}

TEST(ToolParser, SplitEquivalenceOnMixedOutput) {
  expect_tool_split_equivalence(from_literal(
      "Intro é.\n<|tool_call>call:a{s:<|\"|>x<y 😀<|\"|>,n:-1.5e3,l:[true,None,{k:'v'}]}<tool_call|> mid "
      "<|tool_call>call:b(q=\"\\u00e9\\n\")<tool_call|><|tool_call>bad<|tool_call>call:c{a:1, ]x}"
      "<tool_call|>end<|tool_response>"));
}

TEST(Gemma4Args, ToJson) {
  EXPECT_EQ(args_json(R"x({location:<|"|>Tokyo<|"|>,n:42,f:1.5,b:false,z:null,o:{p:[1,<|"|>a<|"|>]}})x"),
            Json::parse(R"({"location":"Tokyo","n":42,"f":1.5,"b":false,"z":null,"o":{"p":[1,"a"]}})"));
  EXPECT_EQ(args_json(R"x(location:<|"|>Tokyo<|"|>,unit:<|"|>c<|"|>)x"),
            Json::parse(R"({"location":"Tokyo","unit":"c"})"));
  EXPECT_EQ(gemma4_args_to_json("(a='x', n=3)"), Json::parse(R"({"a":"x","n":3})"));
  EXPECT_EQ(gemma4_args_to_json(" {} "), Json::object());
  EXPECT_EQ(gemma4_args_to_json(""), Json::object());
}

// A numeral beyond a double's range is a string (JSON parsers refuse such a number or read infinity;
// found by fuzz_tool_call); one that underflows reads as 0 everywhere and stays a number.
TEST(Gemma4Args, NumbersBeyondADoubleAreStrings) {
  EXPECT_EQ(gemma4_args_to_json("{a:1e400,b:-1.8e308,c:0.5e3777777777777777777777,d:1.5e308,e:1e-400,f:-0.0}"),
            Json::parse(R"({"a":"1e400","b":"-1.8e308","c":"0.5e3777777777777777777777","d":1.5e308,"e":1e-400,"f":-0.0})"));
  const std::string digits(400, '7');
  EXPECT_EQ(gemma4_args_to_json("{n:" + digits + "}"), Json::parse(R"({"n":")" + digits + R"("})"));
  const ToolParseResult r = parse_tool_calls(from_literal("<|tool_call>call:f{a:[1e400,2]}<tool_call|>"));
  ASSERT_EQ(r.calls.size(), 1u);
  const Json j = Json::parse(r.calls[0].arguments_json, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.calls[0].arguments_json;
  EXPECT_EQ(j, Json::parse(R"({"a":["1e400",2]})"));
}

TEST(Gemma4Args, RejectsIncompleteOrMalformed) {
  for (const char* bad : {"{a:1", "{a:<|\"|>x}", "{a 1}", "{a:1} extra", "{:1}", "{a:[1,2}", "{\"a\"}", "a:1,}",
                          "{a:1<tool_call|>}", "{<|\"|>unterminated key", "{a:1]"}) {
    try {
      gemma4_args_to_json(from_literal(bad));
      ADD_FAILURE() << "accepted: " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << bad;
    }
  }
}

TEST(Gemma4Args, DumpLikePython) {
  const Json j = Json::parse(R"({"b":[1,2.5,"é\n\"",null,true],"a":{}})");
  EXPECT_EQ(gemma4_dump_json(j), "{\"a\": {}, \"b\": [1, 2.5, \"é\\n\\\"\", null, true]}");
}

}  // namespace
}  // namespace dgemma
