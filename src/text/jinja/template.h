#pragma once
// A Jinja template interpreter for Hugging Face chat templates: the subset of jinja2 that chat
// templates use, with the semantics of transformers' apply_chat_template environment
// (ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on, loopcontrols, the HF tojson,
// raise_exception and strftime_now globals, jinja2's default Undefined). Tested byte for byte against
// python3-jinja2 (tests/fixtures/jinja/, tools/jinja/make_corpus.py).
//
// Known differences from jinja2 (documented in docs/API.md): integers are 64-bit (overflow is an
// error, Python's are unbounded); `escape` returns plain text (no Markup type, autoescape is off in
// transformers anyway); str.format supports plain `{}` / `{0}` / `{name}` fields only.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace dgemma::jinja {

struct Program;
struct Frame;

// Bounds on one render; exceeding one is a clear Error(kInvalidArgument), never a hang.
struct RenderLimits {
  size_t max_output_bytes = 32u << 20;       // output and any single string value
  int64_t max_loop_iterations = 1'000'000;   // all loops of a render together, range() sizes included
  int max_call_depth = 128;                  // nested macro calls (recursion)
};

class Template {
 public:
  // Parses `source`; throws Error(kUnsupported, "chat template line N: ...") naming the construct for
  // syntax errors and for Jinja features outside the supported subset.
  static Template parse(std::string_view source);

  // Renders with `context` (name -> value, e.g. messages, tools, bos_token, add_generation_prompt and
  // the chat_template_kwargs). Throws Error(kInvalidArgument) for what the template raises
  // (raise_exception: its message verbatim) or fails on (UndefinedError, TypeError...: "chat template
  // line N: ...").
  std::string render(const std::vector<std::pair<std::string, Value>>& context, const RenderLimits& limits = {}) const;

  // Variables the template reads that it never assigns (the names a caller may supply).
  const std::vector<std::string>& free_names() const;

 private:
  std::shared_ptr<const Program> program_;
  std::shared_ptr<Frame> globals_;  // range, namespace, dict, raise_exception, strftime_now (read-only)
};

}  // namespace dgemma::jinja
