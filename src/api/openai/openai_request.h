#pragma once
// OpenAI chat/completions request bodies -> validated internal parameters. Every parameter is either
// honoured or rejected with a 400 naming it (Error with param set); nothing is silently dropped.
// Unknown keys are accepted (vLLM compatibility) and reported in unknown_keys for a one-time log line,
// or rejected when RequestPolicy::strict_params is set. See docs/API.md for the full table.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/openai/infill.h"
#include "engine/request.h"
#include "guided/guided.h"
#include "util/json.h"

namespace dgemma {

enum class Endpoint { kChat, kCompletion };

struct RequestPolicy {
  std::vector<std::string> served_names;  // accepted values of "model" (the first is echoed when absent)
  bool enable_auto_tool_choice = false;   // --enable-auto-tool-choice
  bool tool_parser = false;               // --tool-call-parser gemma4
  int vocab_size = 262144;                // token ids in prompts / stop_token_ids must be below this
  bool strict_params = false;             // --strict-params: unknown keys -> 400
  std::function<bool(std::string_view)> is_allowed_template_kwarg;  // chat_template_kwargs allow-list
  Json default_template_kwargs = Json::object();                    // --default-chat-template-kwargs
  bool content_as_string = false;    // --chat-template-content-format string: text parts joined with "\n"
  bool force_include_usage = false;  // --enable-force-include-usage: every stream ends with usage
};

// Limits on request shapes: beyond them -> 400.
struct RequestLimits {
  static constexpr int kMaxN = 16;
  static constexpr int kMaxChoices = 64;  // n x number of prompts (completions)
  static constexpr size_t kMaxStop = 16;
  static constexpr size_t kMaxStopBytes = 1024;
  static constexpr size_t kMaxStopTokenIds = 64;
  static constexpr size_t kMaxMessages = 16384;
  static constexpr size_t kMaxTools = 256;
  static constexpr size_t kMaxPrompts = 64;
  static constexpr size_t kMaxKwargBytes = 1024;
  static constexpr size_t kMaxInfillPieces = 64;
  static constexpr int64_t kMaxInfillHole = 1 << 20;
  static constexpr size_t kMaxImages = 1024;  // image parts parsed per request (the server's limit is lower)
};

// An image part of a chat request: its URL and the parameter that names it in errors.
struct ImageRef {
  std::string url;
  std::string param;
};

// kRequired / kNamed force a call: its opening markup is pinned at the start of the answer and the
// call is decoded under the declared names and argument schemas (docs/API.md "Guided decoding").
enum class ToolChoiceMode { kNone, kAuto, kRequired, kNamed };

// A guided answer (docs/API.md "Guided decoding on the canvas"): the constraint, the parameter that
// set it (for errors), and for a JSON Schema the body keys leading to it: the schema's text is read
// again from the request body with its member order kept (Json sorts members).
struct GuidedForm {
  guided::ConstraintSpec spec;
  std::string param;
  std::vector<std::string> schema_path;
};

struct PromptInput {
  bool is_tokens = false;
  std::string text;
  std::vector<int32_t> tokens;
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;  // the served name to echo

  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  bool continuous_usage = false;    // stream_options.continuous_usage_stats
  bool include_previews = false;    // stream_options.include_previews (dgemma extension)

  std::optional<int64_t> max_tokens;  // the client's cap (max_completion_tokens or max_tokens)
  int n = 1;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool logprobs = false;            // chat logprobs=true / completions logprobs=0
  bool echo = false;                // completions: prepend the prompt text; chat: the last message's (same role)
  std::optional<int64_t> truncate_prompt_tokens;
  SamplingParams sampling;          // everything but max_tokens (decided once the prompt length is known)

  // Chat only.
  Json messages = Json::array();  // validated; tool-call arguments given as JSON strings are parsed to
                                  // objects; image_url parts replaced by {"type": "image"}
  std::vector<ImageRef> images;        // the image_url parts, in message order
  std::optional<int> max_soft_tokens;  // mm_processor_kwargs.max_soft_tokens
  Json tools = nullptr;             // null or a non-empty array of function tools
  ToolChoiceMode tool_choice = ToolChoiceMode::kNone;
  std::string tool_choice_name;     // kNamed: the function
  std::vector<std::string> tool_names;  // the names in `tools`, in order
  bool parallel_tool_calls = true;
  Json template_kwargs = Json::object();  // server defaults merged with the request's chat_template_kwargs
  bool add_generation_prompt = true;
  // Assistant prefill (vLLM's continue_final_message): the last message is an assistant message whose
  // text is pinned at the start of the answer; the response holds only the continuation.
  bool continue_final_message = false;
  // Both endpoints: response_format json_object / json_schema, structured_outputs, guided_* (checked
  // against the supported subset: anything else is a 400 naming it).
  std::optional<GuidedForm> guided;

  // Completions only.
  std::vector<PromptInput> prompts;
  InfillRequest infill;             // `suffix` / `infill_template` (docs/API.md "Infilling")

  std::vector<std::string> unknown_keys;
  std::vector<std::string> ignored_sampling;  // accepted sampling fields that have no effect here
};

// Throws Error(kInvalidArgument / kUnsupported, message, param) for a bad request, Error(kNotFound)
// for an unknown model.
ParsedRequest parse_chat_request(const Json& body, const RequestPolicy& policy);
ParsedRequest parse_completion_request(const Json& body, const RequestPolicy& policy);

// Parses a request body (depth-limited JSON); requires a JSON object.
Json parse_request_body(std::string_view body);

// A chat message's text: its string content, or its text parts concatenated (as the templates render them).
std::string message_text(const Json& message);

// True when chat_template_kwargs asks for thinking (enable_thinking truthy).
bool thinking_enabled(const Json& template_kwargs);

}  // namespace dgemma
