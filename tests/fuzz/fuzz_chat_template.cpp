// libFuzzer target for the chat-template renderer: the input is JSON
// {"messages": [...], "tools": [...], "kwargs": {...}, "add_generation_prompt": bool} (anything else is
// used as the messages value) rendered with the embedded model's DiffusionGemma template. A
// dgemma::Error is an expected rejection; any other exception, a crash, a hang or a sanitizer report
// is a bug. The raw bytes are also compiled as a template.
#include <cstdint>
#include <string>
#include <string_view>

#include "text/chat/chat_template.h"
#include "util/error.h"
#include "util/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dgemma;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    ChatTemplate::from_template_text(text);
  } catch (const Error&) {
  }

  Json input;
  try {
    input = parse_json(text, "fuzz input", /*is_file=*/false);
  } catch (const Error&) {
    return 0;
  }
  Json messages = input;
  Json tools;
  ChatTemplateOptions opts;
  if (input.is_object()) {
    messages = input.contains("messages") ? input["messages"] : Json();
    if (input.contains("tools")) tools = input["tools"];
    if (input.contains("kwargs")) opts.extra_kwargs = input["kwargs"];
    if (input.contains("add_generation_prompt") && input["add_generation_prompt"].is_boolean())
      opts.add_generation_prompt = input["add_generation_prompt"].get<bool>();
  }
  static const ChatTemplate tmpl = ChatTemplate::from_model_dir(DGEMMA_SOURCE_DIR "/models/tiny-code");
  if (!tmpl.present()) __builtin_trap();
  try {
    const std::string out = tmpl.render(messages, tools, opts);
    if (out.rfind("<bos>", 0) != 0) __builtin_trap();  // every render starts with the BOS text
  } catch (const Error&) {
  }
  return 0;
}
