#pragma once
// Splits Gemma 4 model output (detokenized, control tokens as their literal strings) into reasoning
// and answer content. The model writes "<|channel>thought\n...reasoning...<channel|>answer"; the
// "thought\n" label is a structural artefact and is stripped. DiffusionGemma deviations handled
// (SERVING.md §2.1, §2.3, §6.3):
//  - a whole 256-token canvas arrives at once, so the opening marker and the closing marker usually sit
//    in different, large deltas; a marker may also straddle two deltas (partial markers are held back
//    and released as text once they turn out not to be markers);
//  - with thinking off the model still opens with an empty "<|channel>thought\n<channel|>" block (which
//    is dropped), and about a third of the time never closes it: a never-closed thought ends as reasoning;
//  - "<|channel>" without the "thought\n" label;
//  - DeepSeek-style "<think>...</think>" as an alternative marker pair (the same rules apply).
// Only a reasoning block at the very start of the output (leading whitespace allowed) is recognised;
// later markers are ordinary content. Streaming output concatenated equals parse_reasoning() of the
// whole text, for every way of splitting it.
#include <string>
#include <string_view>

namespace dgemma {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  // thinking_enabled: the prompt had enable_thinking. Either way a leading thought block is split off
  // (the model emits one even with thinking off); the flag only decides whether an opening marker may
  // appear after leading whitespace when thinking is off (see the .cpp).
  explicit ReasoningParser(bool thinking_enabled = true);

  // Streaming: feed any split of the output; returns what became final.
  ReasoningDelta feed(std::string_view text);
  // End of output: flushes held-back text (a never-closed thought ends as reasoning).
  ReasoningDelta finish();

  // True once the parser has decided it is past the reasoning block (content is flowing).
  bool in_content() const { return state_ == State::kContent; }

 private:
  enum class State { kStart, kLabel, kReasoning, kContent };
  void step(ReasoningDelta& out, bool final);

  bool thinking_enabled_;
  State state_ = State::kStart;
  std::string pending_;         // not yet decided
  std::string close_marker_;    // the closing marker matching the opener seen
  bool finished_ = false;
};

// Non-streaming helper: {reasoning, content} for a whole output.
ReasoningDelta parse_reasoning(std::string_view text, bool thinking_enabled = true);

}  // namespace dgemma
