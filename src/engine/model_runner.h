#pragma once
// Executes a StepPlan: one batched forward over every item (the denoising canvases' LM-head rows in
// one GEMM into one logits buffer), then over all denoising canvases at once the sampler, the
// self-conditioning GEMM and the decide op (the canvases stay on the device), and one read of all
// canvases' stop flags and argmax rows. Everything the step reads from the host — token ids,
// positions, page tables, attention items, the canvases' buffer addresses, the sampler's and decide's
// arguments — goes up first in one copy (the step's input block), so the step's device work can be
// recorded once per batch size as a CUDA graph and replayed (enable_graphs). The engine core owns the
// policy; a runner only computes. Tests and the
// scripted server use a scripted runner behind the same interface (engine/scripted_runner.h).
// Failures: an item that fails alone reports it through read_error (the engine fails that request,
// the others go on); an exception from run() fails every sequence of the plan (a device error), and the
// engine keeps serving the rest.
#include <cstdint>
#include <deque>
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

  // CUDA graphs (a backend that has them): records one denoising step of b canvases for every b of
  // `buckets` (ascending, at most the largest step the runner will see) and from then on replays the
  // smallest recorded b >= the step's canvases for steps of denoising canvases only (padded with idle
  // canvases) whose canvases ask for no sample filter, no top log-probabilities and no pinned
  // positions; other steps run op by op. The attention launch plans of every denoising step (recorded
  // or not, so both give the same bits) assume caches of `max_context` tokens. Returns the batch sizes
  // recorded (empty: the backend has no graphs). Throws if a recording fails.
  std::vector<int> enable_graphs(const std::vector<int>& buckets, int64_t max_context);
  // The attention plans of denoising steps for caches of max_context tokens without recording graphs
  // (what enable_graphs sets): an op-by-op runner that gives a recording one's bits (checks).
  void set_attention_plan_context(int64_t max_context) { max_context_ = max_context; }
  // Steps replayed from a graph / run op by op so far (benchmarks, tests).
  int64_t graph_steps() const { return graph_steps_; }
  int64_t eager_steps() const { return eager_steps_; }
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
    Tensor soft;         // [C, H] bf16 self-conditioning input of the next step (written by the step)
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
  DeviceState new_state(bool soft);  // a canvas's buffers ([C, H] soft embeddings too when `soft`)
  SamplerArgs sampler_args(const Sequence& seq, DeviceState& d, const Tensor& logits);
  DecideArgs decide_args(const Sequence& seq, DeviceState& d, const Tensor& flags);

  // One step's work on the host side: the forward items (encode items first), and for each denoising
  // canvas its state and its sampler and decide arguments.
  struct Step {
    std::vector<ForwardItem> items;
    std::vector<DeviceState*> canvases;  // the denoising canvases, in item order
    std::vector<const Sequence*> seqs;   // their sequences (nullptr: an idle padding canvas)
    std::vector<SamplerArgs> sampling;
    std::vector<DecideArgs> deciding;
    bool pinned = false;                 // some canvas has pinned positions
  };
  // Where the runner's parts sit in the input block after the forward's (ForwardInputs::words).
  struct BlockLayout {
    int64_t soft_out_at = 0;   // u64 address of each canvas's soft buffer (0: idle)
    int64_t sampler_at = 0, decide_at = 0;  // the backend's encoded arguments
    int64_t words = 0;
  };
  // Appends the runner's parts to in.words; `table_words` as encode_inputs.
  BlockLayout encode_block(const Step& step, ForwardInputs& in) const;
  // The step's device work, from the input block (sent up by the caller) to the flags and argmax rows
  // in out_: what a graph records.
  void execute(Step& step, const ForwardInputs& in, const BlockLayout& lay, const Tensor& block);
  // The state of idle canvas k (padding of replayed steps), and the canvas added to a step as its
  // k-th (its logits and out_ rows k).
  DeviceState& idle_state(int k);
  void add_idle_canvas(Step& step, int k);
  // Whether a step of these canvases may replay a graph: denoising canvases only, none filtered, none
  // with top log-probabilities or pinned positions.
  bool graphable(const Step& step) const;
  void ensure_step_buffers(int64_t canvases);

  struct Graph {
    int canvases = 0;
    std::unique_ptr<StepGraph> graph;
    int64_t words = 0;  // the block's words (the layout recorded with table_room(canvases))
  };
  // Room for the page tables of b canvases of max_context tokens (both groups).
  int64_t table_room(int b) const;

  DiffusionGemma& model_;
  const KvStorage& kv_;
  int canvas_;
  int vocab_;
  std::unordered_map<uint64_t, DeviceState> state_;
  std::deque<DeviceState> idle_;  // padding canvases of replayed steps (a deque: references stay valid as it grows)
  // [rows, V] bf16 logits of a step's denoising canvases (canvas i: rows [i C, (i + 1) C)), grown to
  // the largest step seen; overwritten with the probabilities by the sampler. out_: canvas i's
  // {flags[2], argmax[C]} at row i, read back once per step. Both stay put while graphs exist.
  Tensor logits_;
  Tensor out_;
  std::vector<Graph> graphs_;     // ascending canvases
  Tensor graph_block_;            // the input block the graphs read (the largest layout)
  int64_t max_context_ = 0;       // > 0: attention plans for caches of this many tokens
  int64_t graph_steps_ = 0, eager_steps_ = 0;
  std::function<DumpHook(int64_t)> step_dump_;
  int64_t steps_ = 0;
};

}  // namespace dgemma
