#pragma once
// Splits Gemma 4 model output (markup text, text/parsers/markup_scan.h: the markup tokens as one byte each;
// below they are written as their token text) into reasoning and answer content. The model writes
// "<|channel>thought\n...reasoning...<channel|>answer"; the "thought\n" label is a structural artefact and is
// stripped. Rules (identical for streaming and non-streaming):
//  - Only a block at the very start of the output is reasoning (leading whitespace before the opener is
//    dropped). Openers: "<|channel>" (closed by "<channel|>"; an optional "thought\n" label, or
//    "thought" directly followed by the closer, is stripped) and DeepSeek-style "<think>" (closed by
//    "</think>"), which DiffusionGemma occasionally emits when thinking is not templated.
//  - The block ends at its closer (consumed) or at a "<|tool_call>" (kept, it belongs to the content,
//    i.e. to the tool-call parser). A block never closed ends as reasoning at the end of output.
//  - thinking_enabled = false: the model still opens most replies with an empty
//    "<|channel>thought\n<channel|>" and about a third of the time omits the closer (observed in
//    its outputs). So with thinking off the opener, the label and whitespace are dropped, an immediate
//    closer is dropped too, and a non-empty block is undecided until the output shows what it is: a
//    closer means the text before it was a thought (reasoning; the closer is consumed, so no raw
//    marker reaches the content), a "<|tool_call>" or the end of output means it was the answer
//    (content). Streaming holds such text back until then. ("<think>" blocks are reasoning in both
//    modes.)
//  - starts_in_reasoning: the prompt itself ended inside an open thought channel (the July 2026
//    template ends with "<|channel>thought\n" after a tool response when thinking is on; see
//    prompt_opens_reasoning), so the output starts as reasoning unless it opens a block itself.
//  - Streaming: the plain-text markers ("<think>", "</think>", the label) may straddle deltas (a
//    partial one is held back and released as text once it turns out not to be one); the opener and
//    closer usually arrive in different, large deltas; a delta never ends inside a UTF-8 character.
//    Later markers, after the block, are ordinary content (markup bytes that render() drops).
#include <string>
#include <string_view>

namespace dgemma {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  explicit ReasoningParser(bool thinking_enabled = true, bool starts_in_reasoning = false);

  // Streaming: feed any split of the output; returns what became final.
  ReasoningDelta feed(std::string_view text);
  // End of output: flushes held-back text (a never-closed thought ends as reasoning).
  ReasoningDelta finish();

  // True once the parser is past the reasoning block (everything further is content).
  bool in_content() const { return state_ == State::kContent; }

 private:
  enum class State { kStart, kLabel, kEmptyCheck, kUndecided, kReasoning, kContent };
  void run(ReasoningDelta& out, bool final);
  bool step(ReasoningDelta& out, bool final);  // true: state changed, run again

  bool thinking_enabled_;
  bool starts_in_reasoning_;
  State state_ = State::kStart;
  std::string_view close_;  // the closer of the open block
  std::string buf_;         // text not yet consumed starts at pos_
  size_t pos_ = 0;
  bool finished_ = false;
};

// Non-streaming helper: {reasoning, content} for a whole output.
ReasoningDelta parse_reasoning(std::string_view text, bool thinking_enabled = true,
                               bool starts_in_reasoning = false);

// True if a rendered prompt (text with its control tokens spelled out) leaves the model inside an open
// thought channel, i.e. it ends with "<|channel>" or "<|channel>thought\n": pass the result as
// starts_in_reasoning.
bool prompt_opens_reasoning(std::string_view prompt);

}  // namespace dgemma
