#pragma once
// The engine's step loop without threads (nano-vllm's LLMEngine.step): the scheduler plans, the model
// runner computes, the sequences apply the stop rule and commit. The threaded DiffusionEngine drives
// it for the server; tests and benchmarks may drive it directly.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/block_manager.h"
#include "engine/kv_pool.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/trace.h"
#include "model/config.h"

namespace dgemma {

// How an engine is sized: one value each, from the memory plan (engine_factory.cpp) or a test's choice.
struct EngineSizing {
  int max_num_seqs = 4;
  int64_t max_model_len = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t prefill_chunk = 0;
  KvPoolPlan kv;  // the pool's pages of each group
  bool prefix_caching = true;
  bool fuse_prefill_tail = true;  // SchedulerConfig::fuse_prefill_tail
};

// Something that happened to a sequence during a step: what its request's stream receives.
struct CoreEvent {
  uint64_t seq_id = 0;
  // kCanvas (tokens trimmed at EOS / stop ids / max_tokens), kPreview (the step's argmax canvas) or
  // kError (the sequence failed: it is finished, its pages freed).
  RequestEvent event;
  bool finished = false;  // the sequence is done (its pages are already freed): kError, or its last kCanvas
};

// The scheduler's numbers as the engine publishes them.
struct CoreCounts {
  int64_t running = 0;
  int64_t waiting = 0;
  double kv_usage = 0;
  SchedulerStats scheduler;
};

struct StepStats {
  int denoise_items = 0;
  int encode_items = 0;
  int64_t tokens = 0;
  int preempted = 0;
  bool replayed = false;  // the runner replayed a recorded CUDA graph
};

class EngineCore final : public WarmUpSteps {
 public:
  // The one assembly: a scheduler and page bookkeeping sized by `sizing` for `config` (page = canvas)
  // over the runner.
  static std::unique_ptr<EngineCore> create(const ModelConfig& config, const EngineSizing& sizing,
                                            std::unique_ptr<ModelRunner> runner);
  EngineCore(SchedulerConfig scheduler, BlockManagerConfig blocks, std::unique_ptr<ModelRunner> runner,
             int64_t max_model_len = 0);

  // The runner's one-time device work before serving (ModelRunner::prepare), whose warm-up sequences
  // run with params_for(id) (the engine's defaults); then the core forgets them: their prefix-cache
  // pages and the scheduler's statistics.
  void prepare(const std::function<SequenceParams(uint64_t id)>& params_for);

  // Queues a sequence (the core does not own it; it must outlive its time in the core).
  void add(Sequence* seq);
  // Drops a sequence wherever it is (cancellation); frees its pages and device state.
  void abort(Sequence* seq);
  bool has_work() const { return !scheduler_.running().empty() || !scheduler_.waiting().empty(); }
  // One engine step; appends what happened to `events`.
  StepStats step(std::vector<CoreEvent>& events);

  void set_trace_sink(TraceSink* sink) { trace_ = sink; }
  // Called after each step is planned, before the runner runs it (a step may take long: the threaded
  // engine publishes its queue counts here, so admissions show at once).
  void set_plan_hook(std::function<void(const StepPlan&)> fn) { plan_hook_ = std::move(fn); }
  // Ends a sequence with an error (a failed item or step): frees its pages and device state.
  void fail(Sequence* seq, const std::string& message, std::vector<CoreEvent>& events);
  CoreCounts counts() const;
  Scheduler& scheduler() { return scheduler_; }
  const Scheduler& scheduler() const { return scheduler_; }
  BlockManager& blocks() { return blocks_; }
  const BlockManager& blocks() const { return blocks_; }
  int canvas_length() const { return runner_->canvas_length(); }
  int vocab_size() const { return runner_->vocab_size(); }

  // WarmUpSteps (the runner's prepare).
  int max_num_seqs() const override { return scheduler_.config().max_num_seqs; }
  int64_t max_model_len() const override { return max_model_len_; }
  int64_t max_num_batched_tokens() const override { return scheduler_.config().max_num_batched_tokens; }
  int64_t kv_full_tokens() const override {
    return blocks_.total_pages(KvGroup::kFull) * blocks_.page_size();
  }
  std::string run_to_end(const std::vector<std::vector<int32_t>>& prompts, int steps) override;

 private:
  // The events of one denoising canvas's step result.
  void on_canvas(Sequence& s, CanvasResult r, std::vector<CoreEvent>& events);

  BlockManager blocks_;
  Scheduler scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  int64_t max_model_len_;
  TraceSink* trace_ = nullptr;
  std::function<void(const StepPlan&)> plan_hook_;
  std::function<SequenceParams(uint64_t)> warm_up_params_;  // during prepare
  uint64_t warm_up_id_ = uint64_t{1} << 62;                 // warm-up sequences' ids: far above the requests'
};

}  // namespace dgemma
