#pragma once
// A test-only engine (`--load-format scripted:FILE`): it emits canvases listed in a JSON script instead
// of running a model, with the same request life cycle as the real engine: one worker thread,
// max_num_seqs running slots, a FIFO waiting queue bounded by max_queue (submit throws
// kResourceExhausted when full), cancellation of queued or running requests, EOS / max_tokens trimming
// and kFinished accounting. It lets the HTTP layer be tested end to end, including tool-call and
// reasoning flows a random model never produces. Script format: docs/API.md ("Scripted engine").
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/request.h"
#include "util/json.h"

namespace dgemma {

struct ScriptedEngineOptions {
  int max_num_seqs = 4;
  int max_queue = 1024;
  int64_t max_model_len = 8192;
  int vocab_size = 262144;
  std::vector<int32_t> eos_ids = {1, 106, 50};
  // Tokenises the script's text canvases (control tokens written as text are recognised).
  std::function<std::vector<int32_t>(std::string_view)> encode;
  // Decodes a prompt, to match replies by their "when" substrings.
  std::function<std::string(const std::vector<int32_t>&)> decode;
};

class ScriptedEngine : public EngineInterface {
 public:
  // Throws Error(kInvalidFile) for a malformed script, Error(kNotFound) for a missing file.
  static std::unique_ptr<ScriptedEngine> from_file(const std::string& path, ScriptedEngineOptions options);
  static std::unique_ptr<ScriptedEngine> from_json(const Json& script, ScriptedEngineOptions options);
  ~ScriptedEngine() override;

  std::shared_ptr<RequestStream> submit(GenerationRequest request) override;
  EngineStats stats() const override;
  int64_t max_model_len() const override;
  int vocab_size() const override;

  struct Impl;

 private:
  explicit ScriptedEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dgemma
