#pragma once
// The model's runner: executes a StepPlan as one batched forward over every item (the denoising
// canvases' LM-head rows in one GEMM into one logits buffer), then over all denoising canvases at once
// the sampler, the self-conditioning GEMM and the decide op (the canvases stay on the device), and one
// read of all canvases' stop flags and argmax rows. Everything the step reads from the host goes up
// first in one copy (the step's input block, model/forward_inputs.h), so the step's device work can be
// recorded once per batch size as a CUDA graph and replayed. It owns its device work: the KV pool's
// storage, the per-sequence buffers, and at start-up (prepare) the allocator's ceiling, the warm-up
// that is the memory plan's profile run, and the graphs.
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/guided_tables.h"
#include "engine/kv_pool.h"
#include "engine/model_runner.h"
#include "model/diffusion_gemma.h"

namespace dgemma {

// The device memory budget of the memory plan that the runner keeps its steps under (all 0: none,
// the CPU backend). engine/memory_plan.h.
struct DeviceBudget {
  uint64_t step_ceiling_bytes = 0;       // buffers + workspace steps may hold beyond the weights and the pool
  uint64_t graph_pool_bytes = 0;         // the CUDA graph pool, on top of the step ceiling
  uint64_t runtime_reserve_bytes = 0;    // the allowance outside the allocator (checked by the warm-up)
  uint64_t outside_allocator_bytes = 0;  // device memory in use outside the allocator when the plan was made
};

struct RunnerOptions {
  // The batch sizes the warm-up runs and the CUDA graphs are recorded for (engine_batch_buckets).
  std::vector<int> batch_buckets = {1};
  bool warm_up = false;      // prepare: one warm-up per bucket, the last the memory plan's profile run
  bool cuda_graphs = false;  // prepare: record a denoising step per bucket (a backend with graphs)
  // > 0: the attention launch plans of every denoising step assume caches of this many tokens (what a
  // recorded step needs; an op-by-op runner given it computes a recording one's bits); 0: the step's
  // own caches, or max_model_len once graphs are recorded.
  int64_t plan_context = 0;
  DeviceBudget budget;
  // Debug dumps: called before every step with its index; the hook it returns (may be empty) receives
  // the host copies of that step's forward intermediates. A dumped step runs op by op.
  std::function<DumpHook(int64_t step)> step_dump;
};

// The batch sizes of the warm-up and the CUDA graphs: 1, 2, 4, ... below max_num_seqs, then max_num_seqs.
std::vector<int> engine_batch_buckets(int max_num_seqs);
// The prompt length of the warm-up's last batch of `batch` sequences (the memory plan's profile run):
// a share of the step budget each, so that together they fill a whole step, within max_model_len and
// the pool (each also takes its output canvas and a partial page); never below `floor` tokens.
int64_t warm_up_profile_prompt_len(int64_t max_num_batched_tokens, int64_t max_model_len,
                                   int64_t kv_full_tokens, int64_t canvas_length, int batch, int64_t floor);

class DiffusionModelRunner final : public ModelRunner {
 public:
  // Runs `model` on `backend` (the backend the model was built on), with a KV pool of its own laid out
  // by `pool`. Ownership is shared: the server's runner holds them alone, a test's lends them.
  DiffusionModelRunner(std::shared_ptr<Backend> backend, std::shared_ptr<DiffusionGemma> model,
                       const KvPoolPlan& pool, RunnerOptions options = {});
  ~DiffusionModelRunner() override;
  int canvas_length() const override { return canvas_; }
  int vocab_size() const override { return vocab_; }
  void prepare(WarmUpSteps& steps) override;
  StepResult run(const StepPlan& plan) override;
  void release(const Sequence& seq) override { state_.erase(seq.id()); }

  // The batch sizes whose denoising steps are recorded as CUDA graphs (empty: none).
  std::vector<int> graph_batches() const;
  // prepare()'s CUDA graphs, throwing if a recording fails (prepare then runs op by op). A runner that
  // is one rank of a tensor-parallel model is given this alone (TensorParallelRunner calls it on every
  // rank at once, each on its own thread), so that a failure fails them all: the ranks replay together
  // or not at all.
  void record_rank_graphs(int64_t max_model_len);

 private:
  // The denoising loop's state of one sequence on the backend's device.
  struct DeviceState {
    Tensor canvas;                    // i32 [C] the current (noisy) canvas
    Tensor prev_argmax;               // i32 [C] the previous step's argmax canvas
    Tensor entropy, sample, logprob;  // the sampler's outputs of the current step
    Tensor argmax;                    // i32 [C]: rows of the step's output buffer (read back with the flags)
    Tensor top_ids, top_logprobs;     // [C, top_logprobs] when the request asks
    Tensor soft;  // [C, H] bf16 self-conditioning input of the next step (written by every step)
    // The current canvas's pinned positions (docs/MODEL.md §6.6), when it has some.
    Tensor pin_mask;    // u8 [C]
    Tensor pin_tokens;  // i32 [C]
    // Traces (params().trace) and previews: the step's acceptance mask and decision margins.
    std::vector<int32_t> canvas_in;
    Tensor accept, argmax_gap, sample_gap;
  };
  DeviceState& state_of(const Sequence& seq);
  DeviceState new_state(bool soft);  // a canvas's buffers ([C, H] soft embeddings too when `soft`)
  SamplerArgs sampler_args(const Sequence& seq, DeviceState& d, const Tensor& logits);
  DecideArgs decide_args(const Sequence& seq, DeviceState& d, const Tensor& flags);
  GuidedGap guided_gap(const Sequence& seq);  // inactive without a gap in the current canvas

  // One step's work on the host side: the forward items (encode items first), and for each denoising
  // canvas its state and its sampler and decide arguments.
  struct Step {
    std::vector<ForwardItem> items;
    std::vector<DeviceState*> canvases;  // the denoising canvases, in item order
    std::vector<const Sequence*> seqs;   // their sequences (nullptr: an idle padding canvas)
    std::vector<Tensor> soft_out;        // each canvas's soft buffer (empty: an idle canvas)
    std::vector<SamplerArgs> sampling;
    std::vector<DecideArgs> deciding;
  };
  StepInputs encode(const Step& step, int64_t table_words) const;
  // The step's device work, from the input block (sent up by the caller) to the flags and argmax rows
  // in out_: what a graph records.
  void execute(Step& step, const StepInputs& in, const Tensor& block, const DumpHook& dump);
  // The state of idle canvas k (padding of replayed steps), and the canvas added to a step as its
  // k-th (its logits and out_ rows k).
  DeviceState& idle_state(int k);
  // Canvas i's rows of the logits its sampler reads (logits_, or sampled_ when gathering the vocabulary).
  Tensor sampler_logits(int64_t i) const;
  void add_idle_canvas(Step& step, int k);
  // Whether a step may replay a graph: denoising canvases only, none filtered, none with top
  // log-probabilities, pinned positions or a guided gap, no dump.
  bool graphable(const Step& step, bool dumping) const;
  void ensure_step_buffers(int64_t canvases);
  // The step's dump hook (host copies of the intermediates), if the options' step_dump gives one.
  DumpHook step_dump_hook();
  // What the step gave canvas i (`values`: its row of out_, read back), as its sequence's params ask.
  CanvasResult result_of(const Sequence& seq, DeviceState& d, const int32_t* values);
  StepRecord trace_of(const Sequence& seq, DeviceState& d, std::vector<int32_t> argmax, bool stop);

  // prepare()'s parts (runner_prepare.cpp).
  void cap_allocator();
  void warm_up(WarmUpSteps& steps);
  void record_graphs(int64_t max_model_len);

  struct Graph {
    int canvases = 0;
    std::unique_ptr<StepGraph> graph;
    int64_t words = 0;  // the block's words (the layout recorded with table_room(canvases))
  };
  // Records one denoising step of b canvases for every b of the buckets (ascending); throws if a
  // recording fails; leaves no graphs when the backend records none.
  void enable_graphs(const std::vector<int>& buckets);
  // Room for the page tables of b canvases of plan_context_ tokens (both groups).
  int64_t table_room(int b) const;

  // Declared first, destroyed last: every tensor below lives on this backend.
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<DiffusionGemma> model_;
  RunnerOptions options_;
  KvStorage kv_;
  int canvas_;
  int vocab_;
  std::unordered_map<uint64_t, DeviceState> state_;
  GuidedTableCache guided_;  // guided decoding's tables on the device
  std::deque<DeviceState>
      idle_;  // padding canvases of replayed steps (a deque: references stay valid as it grows)
  // [rows, V] bf16 logits of a step's denoising canvases (canvas i: rows [i C, (i + 1) C)), grown to
  // the largest step seen; overwritten with the probabilities by the sampler. out_: canvas i's
  // {flags[2], argmax[C]} at row i, read back once per step. Both stay put while graphs exist.
  Tensor logits_;
  // [rows, whole vocabulary]: the gathered logits a rank samples when the model gathers the
  // vocabulary (DiffusionGemma::gathers_vocabulary; else empty), overwritten with the probabilities.
  Tensor sampled_;
  Tensor out_;
  std::vector<Graph> graphs_;  // ascending canvases
  Tensor graph_block_;         // the input block the graphs read (the largest layout)
  int64_t plan_context_ = 0;   // > 0: attention plans for caches of this many tokens
  int64_t steps_ = 0;
};

}  // namespace dgemma
