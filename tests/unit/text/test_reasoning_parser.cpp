// Gemma 4 reasoning split: "<|channel>thought\n...<channel|>" and "<think>...</think>", the
// DiffusionGemma deviations (empty block with thinking off, missing closer, no label, markers arriving
// in different deltas), and streaming == non-streaming for every split. Texts are written with the
// markup spelled out and turned into markup text (markup::from_literal); results are spelled out again.
#include <gtest/gtest.h>

#include <string>

#include "parser_split_check.h"
#include "text/parsers/markup_scan.h"
#include "text/parsers/reasoning_parser.h"
#include "text/parsers/tool_parser.h"

namespace dgemma {
namespace {

using markup::from_literal;
using testing::expect_reasoning_split_equivalence;

std::string lit(std::string_view markup_text) {
  return markup::render(markup_text, true);
}

struct Split {
  std::string reasoning;
  std::string content;
};

// Non-streaming result, after checking the streaming equivalence for the same mode.
Split parse(std::string_view literal, bool thinking, bool starts_in_reasoning = false) {
  const std::string text = from_literal(literal);
  expect_reasoning_split_equivalence(text, thinking, starts_in_reasoning);
  const ReasoningDelta d = parse_reasoning(text, thinking, starts_in_reasoning);
  return {lit(d.reasoning), lit(d.content)};
}

#define EXPECT_SPLIT(text, thinking, r, c)             \
  do {                                                 \
    const Split s_ = parse(text, thinking);            \
    EXPECT_EQ(s_.reasoning, r) << "text: " << (text);  \
    EXPECT_EQ(s_.content, c) << "text: " << (text);    \
  } while (0)

TEST(ReasoningParser, ThoughtBlockThenAnswer) {
  EXPECT_SPLIT("<|channel>thought\nThe user wants X.\nSo Y.<channel|>The answer is Y.", true,
               "The user wants X.\nSo Y.", "The answer is Y.");
  EXPECT_SPLIT("\n <|channel>thought\nr<channel|>\n\nAnswer", true, "r", "\n\nAnswer");
}

TEST(ReasoningParser, NoMarkersIsContent) {
  EXPECT_SPLIT("Plain answer.", true, "", "Plain answer.");
  EXPECT_SPLIT("Plain answer.", false, "", "Plain answer.");
  EXPECT_SPLIT("  indented answer", true, "", "  indented answer");
  EXPECT_SPLIT("", true, "", "");
  // Things that look like the start of a marker but are not.
  EXPECT_SPLIT("<|chan is not a marker", true, "", "<|chan is not a marker");
  EXPECT_SPLIT("<thinking about it>", true, "", "<thinking about it>");
}

TEST(ReasoningParser, NeverClosedEndsAsReasoning) {
  EXPECT_SPLIT("<|channel>thought\nStill thinking when max_tokens hit", true, "Still thinking when max_tokens hit", "");
  EXPECT_SPLIT("<|channel>thought\nends with a partial closer <channel", true, "ends with a partial closer <channel", "");
  EXPECT_SPLIT("<think>unfinished", true, "unfinished", "");
}

TEST(ReasoningParser, EmptyThoughtBlock) {
  EXPECT_SPLIT("<|channel>thought\n<channel|>Hello!", true, "", "Hello!");
  EXPECT_SPLIT("<|channel>thought\n<channel|>Hello!", false, "", "Hello!");
  EXPECT_SPLIT("<|channel>thought\n \n<channel|>Hello!", false, "", "Hello!");
  EXPECT_SPLIT("<|channel>thought<channel|>Hello!", true, "", "Hello!");
  EXPECT_SPLIT("<|channel><channel|>Hello!", false, "", "Hello!");
  EXPECT_SPLIT("<|channel>thought\n", true, "", "");
  EXPECT_SPLIT("<|channel>thought", false, "", "");
}

TEST(ReasoningParser, ThinkingOffMissingCloserIsTheAnswer) {
  // With thinking off the model opens an empty block and about a third of the time never closes it:
  // the text is the answer, not reasoning (else users would see empty answers).
  EXPECT_SPLIT("<|channel>thought\nParis is the capital of France.", false, "", "Paris is the capital of France.");
  EXPECT_SPLIT("<|channel>thought\n\nParis.", false, "", "Paris.");
  // The same text with thinking on is an unfinished thought.
  EXPECT_SPLIT("<|channel>thought\nParis is the capital of France.", true, "Paris is the capital of France.", "");
}

TEST(ReasoningParser, ThinkingOffClosedBlockIsAThought) {
  // Thinking off, yet a non-empty block that the model closes: the text before the closer was a
  // thought, so it is reasoning and no raw "<channel|>" reaches the content (issue: the answer came
  // back as "Need a lookup.<channel|>Answer.").
  EXPECT_SPLIT("<|channel>thought\nNeed a lookup.<channel|>Answer.", false, "Need a lookup.", "Answer.");
  EXPECT_SPLIT("<|channel>thought\n\nplan\n<channel|>\nDone", false, "plan\n", "\nDone");
  // Undecided text followed by a tool call was the answer: it stays content, the call is kept.
  const std::string call = "<|tool_call>call:f{a:1}<tool_call|>";
  EXPECT_SPLIT("<|channel>thought\nLet me check." + call, false, "", "Let me check." + call);
  // Streaming holds the undecided text back until the closer decides it.
  ReasoningParser p(false);
  ReasoningDelta d = p.feed(from_literal("<|channel>thought\nNeed a lookup."));
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "");
  d = p.feed(from_literal("<channel|>Answer."));
  EXPECT_EQ(d.reasoning, "Need a lookup.");
  EXPECT_EQ(d.content, "Answer.");
}

TEST(ReasoningParser, ChannelWithoutLabel) {
  EXPECT_SPLIT("<|channel>Reasoning here<channel|>Answer", true, "Reasoning here", "Answer");
  EXPECT_SPLIT("<|channel>thoughts are these<channel|>Answer", true, "thoughts are these", "Answer");
  EXPECT_SPLIT("<|channel>thought about it<channel|>Answer", true, "thought about it", "Answer");
  EXPECT_SPLIT("<|channel>tho", true, "tho", "");
}

TEST(ReasoningParser, DeepSeekThinkTags) {
  EXPECT_SPLIT("<think>\nLet me see.\n</think>\nAnswer", true, "\nLet me see.\n", "\nAnswer");
  EXPECT_SPLIT("<think>r</think>c", false, "r", "c");
  // A "thought\n" label is only a <|channel> artefact.
  EXPECT_SPLIT("<think>thought\nr</think>c", true, "thought\nr", "c");
}

TEST(ReasoningParser, OnlyALeadingBlockIsReasoning) {
  EXPECT_SPLIT("Answer <|channel>thought\nx<channel|> more", true, "", "Answer <|channel>thought\nx<channel|> more");
  EXPECT_SPLIT("<|channel>thought\na<channel|>b<|channel>thought\nc<channel|>d", true, "a",
               "b<|channel>thought\nc<channel|>d");
  // A closer without an opener is content.
  EXPECT_SPLIT("x<channel|>y", true, "", "x<channel|>y");
}

TEST(ReasoningParser, ToolCallEndsReasoning) {
  const std::string call = "<|tool_call>call:f{a:1}<tool_call|>";
  EXPECT_SPLIT("<|channel>thought\nI should call f." + call, true, "I should call f.", call);
  EXPECT_SPLIT("<|channel>thought\nplan<channel|>" + call, true, "plan", call);
  // The content then goes to the tool-call parser.
  const ToolParseResult r =
      parse_tool_calls(parse_reasoning(from_literal("<|channel>thought\nplan" + call)).content);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"a": 1})");
}

TEST(ReasoningParser, PromptOpenedTheChannel) {
  // July template, thinking on, after a tool response: the prompt ends with "<|channel>thought\n".
  EXPECT_TRUE(prompt_opens_reasoning("<|turn>model\n<|tool_call>call:f{}<tool_call|><|tool_response>response:f{v:1}"
                                     "<tool_response|><|channel>thought\n"));
  EXPECT_TRUE(prompt_opens_reasoning("...<|channel>"));
  EXPECT_FALSE(prompt_opens_reasoning("<|turn>model\n<|channel>thought\n<channel|>"));
  EXPECT_FALSE(prompt_opens_reasoning("<|turn>model\n"));
  const Split s = parse("The result says 18 C.<channel|>It is 18 C.", true, true);
  EXPECT_EQ(s.reasoning, "The result says 18 C.");
  EXPECT_EQ(s.content, "It is 18 C.");
  const Split t = parse("<|channel>thought\nagain<channel|>ok", true, true);
  EXPECT_EQ(t.reasoning, "again");
  EXPECT_EQ(t.content, "ok");
}

TEST(ReasoningParser, CanvasSizedDeltas) {
  // A whole canvas arrives at once; the closer comes several canvases later.
  ReasoningParser p(true);
  ReasoningDelta d = p.feed(from_literal("<|channel>thought\nStep 1: read the question. "));
  EXPECT_EQ(d.reasoning, "Step 1: read the question. ");
  EXPECT_EQ(d.content, "");
  d = p.feed("Step 2: answer it. <chan");  // text that spells part of a marker is text
  EXPECT_EQ(d.reasoning, "Step 2: answer it. <chan");
  EXPECT_FALSE(p.in_content());
  d = p.feed(from_literal("<channel|>The answer."));
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "The answer.");
  EXPECT_TRUE(p.in_content());
  d = p.feed(from_literal(" More <|channel> text"));
  EXPECT_EQ(lit(d.content), " More <|channel> text");
  d = p.finish();
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "");
}

TEST(ReasoningParser, LabelHeldUntilDecided) {
  ReasoningParser p(true);
  EXPECT_EQ(p.feed(from_literal("<|channel>thou")).reasoning, "");
  const ReasoningDelta d = p.feed("ght\nidea");
  EXPECT_EQ(d.reasoning, "idea");
  ReasoningParser q(true);
  EXPECT_EQ(q.feed(from_literal("<|channel>thou")).reasoning, "");
  EXPECT_EQ(q.feed("sands of").reasoning, "thousands of");  // not the label: released
}

TEST(ReasoningParser, PartialTextMarkerReleasedAsText) {
  ReasoningParser p(true);
  ReasoningDelta d = p.feed("<thi");  // may still become "<think>"
  EXPECT_EQ(d.content, "");
  d = p.feed("s is not a tag");
  EXPECT_EQ(d.content, "<this is not a tag");
}

TEST(ReasoningParser, DeltasNeverSplitUtf8) {
  ReasoningParser p(true);
  ReasoningDelta d = p.feed(from_literal("<|channel>thought\n\xE6\x97"));
  EXPECT_EQ(d.reasoning, "");
  d = p.feed(from_literal("\xA5<channel|>\xF0\x9F\x98"));
  EXPECT_EQ(d.reasoning, "\xE6\x97\xA5");
  EXPECT_EQ(d.content, "");
  d = p.feed("\x80");
  EXPECT_EQ(d.content, "\xF0\x9F\x98\x80");
}

TEST(ReasoningParser, SplitEquivalenceBothModes) {
  for (bool thinking : {true, false}) {
    for (const char* text :
         {"<|channel>thought\nA<b <chan <channel| x<channel|>C <|tool_call>", " \n<|channel>thought\n\n<channel|>\nHi",
          "<|channel>thoughtX<channel|>", "<think>a</thin</think>b", "<|channel>thought\nr<|tool_call>call:f{}",
          "\xC3\xA9<|channel>", "<|channel>thought \n<channel|>x", "<|chann<|channel>x"}) {
      SCOPED_TRACE(text);
      expect_reasoning_split_equivalence(from_literal(text), thinking);
      expect_reasoning_split_equivalence(from_literal(text), thinking, true);
    }
  }
}

}  // namespace
}  // namespace dgemma
