#pragma once
// Executes a StepPlan: one batched forward over every item (the denoising canvases' LM-head rows in
// one GEMM into one logits buffer), then over all denoising canvases at once the sampler, the
// self-conditioning GEMM and the decide op (the canvases stay on the device), and one read of all
// canvases' stop flags and argmax rows. The engine core owns the policy; a runner only computes. Tests and the
// scripted server use a scripted runner behind the same interface (engine/scripted_runner.h).
// Failures: an item that fails alone reports it through read_error (the engine fails that request,
// the others go on); an exception from run() fails every sequence of the plan (a device error), and the
// engine keeps serving the rest.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/sequence.h"
#include "engine/step_plan.h"
#include "engine/trace.h"
#include "model/diffusion_gemma.h"
#include "model/kv_view.h"

namespace dgemma {

// decide's two flags for one denoising canvas of the step.
struct DenoiseFlags {
  bool same_argmax = false;
  bool confident = false;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual int canvas_length() const = 0;
  virtual int vocab_size() const = 0;
  // Runs the plan; returns the flags of its denoise items, in plan order.
  virtual std::vector<DenoiseFlags> run(const StepPlan& plan) = 0;
  // The argmax canvas of the sequence's last step (and the argmax log-probabilities when asked).
  virtual std::vector<int32_t> read_argmax(const Sequence& seq) = 0;
  virtual std::vector<float> read_logprobs(const Sequence& seq) = 0;
  // The top params().top_logprobs alternatives of every position of the last step (empty when the
  // runner does not compute them).
  virtual TopAlternatives read_top_logprobs(const Sequence&) { return {}; }
  // Per position of the sequence's last step: the entropy and whether decide accepted it (previews;
  // empty when the runner does not know them).
  virtual std::vector<float> read_entropy(const Sequence&) { return {}; }
  virtual std::vector<uint8_t> read_accepted(const Sequence&) { return {}; }
  // Non-empty when the sequence's denoising item of the last step failed: why (its flags are ignored).
  virtual std::string read_error(const Sequence&) { return {}; }
  // The trace record of the sequence's last step (params().trace only), with the stop decision.
  virtual StepRecord read_trace(const Sequence& seq, bool stop) = 0;
  // Drops the per-sequence device state (finished, aborted or preempted).
  virtual void release(const Sequence& seq) = 0;
};

class DiffusionModelRunner final : public ModelRunner {
 public:
  DiffusionModelRunner(DiffusionGemma& model, const KvStorage& kv);
  int canvas_length() const override { return canvas_; }
  int vocab_size() const override { return vocab_; }
  std::vector<DenoiseFlags> run(const StepPlan& plan) override;
  std::vector<int32_t> read_argmax(const Sequence& seq) override;
  std::vector<float> read_logprobs(const Sequence& seq) override;
  TopAlternatives read_top_logprobs(const Sequence& seq) override;
  std::vector<float> read_entropy(const Sequence& seq) override;
  std::vector<uint8_t> read_accepted(const Sequence& seq) override;
  StepRecord read_trace(const Sequence& seq, bool stop) override;
  void release(const Sequence& seq) override { state_.erase(seq.id()); }

  DiffusionGemma& model() { return model_; }
  // Called before each step with its index; the hook it returns gets that forward's intermediates.
  void set_step_dump(std::function<DumpHook(int64_t)> fn) { step_dump_ = std::move(fn); }

 private:
  // The denoising loop's state of one sequence on the backend's device.
  struct DeviceState {
    Tensor canvas;       // i32 [C] the current (noisy) canvas
    Tensor prev_argmax;  // i32 [C] the previous step's argmax canvas
    Tensor entropy, sample, logprob;  // the sampler's outputs of the current step
    Tensor argmax;       // i32 [C]: rows of the step's output buffer (read back with the flags)
    std::vector<int32_t> argmax_host;  // its host copy, read with the step's flags
    Tensor top_ids, top_logprobs;             // [C, top_logprobs] when the request asks
    Tensor soft;         // [C, H] bf16 self-conditioning input of the next step: rows of a step's buffer
    bool have_soft = false;
    // The current canvas's pinned positions (docs/MODEL.md §6.6); pinned false: none.
    Tensor pin_mask;     // u8 [C]
    Tensor pin_tokens;   // i32 [C]
    bool pinned = false;
    // Trace of the last step (params().trace only).
    std::vector<int32_t> canvas_in;
    float temperature = 0;
    Tensor accept, argmax_gap, sample_gap;
  };
  DeviceState& state_of(const Sequence& seq);
  SamplerArgs sampler_args(const Sequence& seq, DeviceState& d, const Tensor& logits);
  DecideArgs decide_args(const Sequence& seq, DeviceState& d, const Tensor& flags);

  DiffusionGemma& model_;
  const KvStorage& kv_;
  int canvas_;
  int vocab_;
  std::unordered_map<uint64_t, DeviceState> state_;
  // [rows, V] bf16 logits of a step's denoising canvases (canvas i: rows [i C, (i + 1) C)), grown to
  // the largest step seen; overwritten with the probabilities by the sampler.
  Tensor logits_;
  std::function<DumpHook(int64_t)> step_dump_;
  int64_t steps_ = 0;
};

}  // namespace dgemma
