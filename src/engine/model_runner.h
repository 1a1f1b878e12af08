#pragma once
// The model runner interface (nano-vllm's ModelRunner): the engine core owns the policy, a runner only
// computes. run() executes a StepPlan and returns what the step gave each denoising canvas; prepare()
// is its one-time device work before serving. The model's runner is engine/diffusion_runner.h; tests
// and the test server put a scripted one behind the same interface.
// Failures: an item that fails alone reports it in its CanvasResult (the engine fails that request, the
// others go on); an exception from run() fails every sequence of the plan (a device error), and the
// engine keeps serving the rest; a FatalError from run() (a tensor-parallel rank died) stops the engine.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sequence.h"
#include "engine/step_plan.h"
#include "engine/trace.h"

namespace dgemma {

// decide's two flags for one denoising canvas of the step.
struct DenoiseFlags {
  bool same_argmax = false;
  bool confident = false;
};

// What one denoising canvas's step gave. The outputs a sequence's params ask for are filled; the
// commit's (logprobs, top) only on the canvas's last step (Sequence::last_step of the flags).
struct CanvasResult {
  DenoiseFlags flags;
  std::string error;                // non-empty: this item failed (the rest is not filled)
  std::vector<int32_t> argmax;      // the step's argmax canvas (pinned positions: the model's argmax)
  std::vector<float> logprobs;      // params().logprobs: the argmax log-probabilities
  TopAlternatives top;              // params().top_logprobs > 0 (n = 0: the runner does not compute them)
  std::vector<float> entropy;       // params().previews: per position (empty: the runner does not know them)
  std::vector<uint8_t> accepted;    // params().previews: decide's acceptance mask
  std::optional<StepRecord> trace;  // params().trace, with the stop decision
};

// What a step gave: one CanvasResult per denoise item of the plan, in plan order.
struct StepResult {
  std::vector<CanvasResult> canvases;
  bool replayed = false;  // the step's device work replayed a recorded CUDA graph (else op by op)
};

// What a runner's start-up work may ask of the engine core: its sizing, and steps of sequences
// through the real scheduler and page pool (EngineCore implements it).
class WarmUpSteps {
 public:
  virtual ~WarmUpSteps() = default;
  virtual int max_num_seqs() const = 0;
  virtual int64_t max_model_len() const = 0;
  virtual int64_t max_num_batched_tokens() const = 0;
  virtual int64_t kv_full_tokens() const = 0;  // tokens the full-attention pages hold
  // Runs one sequence per prompt (default parameters, ignore_eos, one canvas of `steps` denoising
  // steps) through the scheduler until all end; returns why a sequence failed (empty: none did).
  virtual std::string run_to_end(const std::vector<std::vector<int32_t>>& prompts, int steps) = 0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual int canvas_length() const = 0;
  virtual int vocab_size() const = 0;
  // One-time device work before the first request (warm-up, CUDA graphs, the allocator's ceiling);
  // nothing by default.
  virtual void prepare(WarmUpSteps& /*steps*/) {}
  // Runs the plan.
  virtual StepResult run(const StepPlan& plan) = 0;
  // Drops the per-sequence device state (finished, aborted or preempted).
  virtual void release(const Sequence& seq) = 0;
};

}  // namespace dgemma
