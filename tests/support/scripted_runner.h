#pragma once
// A test model runner (the test server's `--load-format scripted:FILE`): instead of a forward pass it
// replays canned canvases from a JSON script, behind the real engine — EngineCore, Scheduler,
// BlockManager and Sequence drive it exactly as they drive the model, so end-to-end tests exercise the
// queueing, admission, cancellation, preemption and trimming users run, with replies (tool calls,
// reasoning) a random model never produces.
//
// How a reply becomes canvases: the reply chosen for a request (by its prompt) is a token stream —
// its segments' tokens, then the request's first EOS id — cut into canvases of the engine's canvas
// length: canvas k shows stream positions [k*C, (k+1)*C), and positions past the stream show seeded
// filler (what `ignore_eos` keeps generating). The sequence's own rules then trim the committed canvas
// at EOS / stop ids / max_tokens, and lays the pinned spans on every shown and committed canvas, as
// with the model (a pinned position counts as accepted).
//
// Steps and time: a canvas settles after its scripted `steps` (at least the request's
// stability_threshold, at most its max_denoising_steps): the runner reports decide's flags so that the
// sequence's stop rule ends it there, and the argmax canvas shows a growing share of the final canvas
// (positions not yet final show filler), which previews display. Each step sleeps the canvas's delay
// divided by its steps (a batched step: the longest of its items); the prompt's last prefill chunk
// sleeps prefill_delay_ms.
//
// Errors: an error segment fails the canvas that holds its stream position (the tokens before it
// that fill whole canvases are committed first): at that canvas's last step the runner reports the
// item failed, and the engine finishes that request with an error while the others go on. Script
// format: docs/API.md ("Scripted runner").
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/engine_config.h"
#include "engine/model_runner.h"
#include "util/json.h"

namespace dgemma {

// The tokenizer a script is read with.
struct ScriptTokenizer {
  // Tokenises a text segment (control tokens written as text are recognised).
  std::function<std::vector<int32_t>(std::string_view)> encode;
  // Decodes a prompt, to match replies by their "when" substrings.
  std::function<std::string(const std::vector<int32_t>&)> decode;
};

struct ScriptedRunnerOptions {
  int canvas_length = 256;
  int vocab_size = 262144;
  std::vector<int32_t> eos_ids;  // kept out of the filler
  ScriptTokenizer tokenizer;
};

class ScriptedRunner final : public ModelRunner {
 public:
  // Throws Error(kInvalidFile) for a malformed script.
  static std::unique_ptr<ScriptedRunner> from_json(const Json& script, ScriptedRunnerOptions options);
  // The script's "canvas_length", if it sets one (the engine's canvas length, as
  // --diffusion-config canvas_length would set it).
  static std::optional<int> canvas_length_of(const Json& script);

  int canvas_length() const override { return opt_.canvas_length; }
  int vocab_size() const override { return opt_.vocab_size; }
  StepResult run(const StepPlan& plan) override;
  void release(const Sequence& seq) override { state_.erase(seq.id()); }

  struct Segment {
    std::vector<int32_t> tokens;
    std::string error;     // non-empty: the canvas holding this position fails
    double delay_ms = -1;  // < 0: the script's default
    int steps = -1;        // < 1: the script's default
  };
  struct Reply {
    std::vector<std::string> when;  // all must occur in the decoded prompt; empty: matches anything
    std::vector<Segment> segments;
    int random_canvases = 0;  // > 0: this many canvases of seeded filler, then EOS
  };
  struct Script {
    int steps = 8;
    double canvas_delay_ms = 20;
    double prefill_delay_ms = 0;
    std::vector<int32_t> filler;  // token ids filler is drawn from
    std::vector<Reply> replies;
    Reply fallback;  // when no reply matches
  };

 private:
  // What one canvas of a reply does.
  struct CanvasScript {
    int steps = 1;
    double delay_ms = 0;
    std::string error;
  };
  // A sequence's reply, laid out as a stream, and where its current canvas stands.
  struct SeqState {
    std::vector<int32_t> stream;         // reply tokens, then EOS
    std::vector<CanvasScript> canvases;  // per canvas of the stream (later canvases: the defaults)
    int canvas = -1, step = -1;          // the canvas and 0-based step of the last denoising step
    int steps = 1;                       // the steps that canvas takes
  };

  ScriptedRunner(Script script, ScriptedRunnerOptions options)
      : script_(std::move(script)), opt_(std::move(options)) {}
  SeqState& state_of(const Sequence& seq);
  CanvasScript canvas_script(const SeqState& st, int k) const;
  int steps_of(const Sequence& seq, const CanvasScript& c) const;
  std::vector<int32_t> final_canvas(const Sequence& seq, const SeqState& st, int k) const;
  int32_t filler(uint64_t seed, uint64_t canvas, uint64_t pos) const;
  // How many positions of the argmax canvas are final at 0-based step `step` of `steps`.
  int final_positions(const Sequence& seq, int step, int steps) const;
  // What the sequence's last step (its state's canvas and step) shows.
  std::vector<int32_t> argmax_of(const Sequence& seq, const SeqState& st) const;
  std::vector<uint8_t> accepted_of(const Sequence& seq, const SeqState& st) const;
  std::vector<float> entropy_of(const Sequence& seq, const SeqState& st) const;
  std::vector<float> logprobs_of(const Sequence& seq, const SeqState& st) const;

  Script script_;
  ScriptedRunnerOptions opt_;
  std::unordered_map<uint64_t, SeqState> state_;
};

// The scripted server's engine: the real DiffusionEngine (thread, queue, streams, EngineCore) over a
// ScriptedRunner, sized by the same memory plan as the CPU model engine (max_num_seqs sequences of
// max_model_len, or --kv-cache-memory). `config.model_dir` still needs config.json (vocabulary,
// canvas length, layer shapes for the page plan) and may have generation_config.json (EOS ids and
// the sampler defaults requests resolve against). Throws Error for a bad script or flags.
std::unique_ptr<EngineInterface> create_scripted_engine(const EngineConfig& config,
                                                        const std::string& script_file,
                                                        ScriptTokenizer tokenizer);
std::unique_ptr<EngineInterface> create_scripted_engine(const EngineConfig& config, const Json& script,
                                                        ScriptTokenizer tokenizer);

}  // namespace dgemma
