// The test server's engine: the real DiffusionEngine over a ScriptedRunner (support/scripted_runner.h).
#include "engine/engine_config.h"
#include "support/scripted_runner.h"
#include "util/mmap_file.h"

namespace dgemma {

std::unique_ptr<EngineInterface> create_scripted_engine(const EngineConfig& c, const Json& script,
                                                        ScriptTokenizer tokenizer) {
  return create_engine_with_runner(c, ScriptedRunner::canvas_length_of(script),
                                   [&](const ModelConfig& mc, const GenerationConfig& g,
                                       const KvPoolPlan&) -> std::unique_ptr<ModelRunner> {
                                     ScriptedRunnerOptions o;
                                     o.canvas_length = mc.canvas_length;
                                     o.vocab_size = static_cast<int>(mc.text.vocab_size);
                                     o.eos_ids = g.eos_token_ids;
                                     o.tokenizer = std::move(tokenizer);
                                     return ScriptedRunner::from_json(script, std::move(o));
                                   });
}

std::unique_ptr<EngineInterface> create_scripted_engine(const EngineConfig& c, const std::string& script_file,
                                                        ScriptTokenizer tokenizer) {
  const std::string text = read_text_file(script_file, 16u << 20);
  return create_scripted_engine(c, parse_json(text, script_file, /*is_file=*/true), std::move(tokenizer));
}

}  // namespace dgemma
