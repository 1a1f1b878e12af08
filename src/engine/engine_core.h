#pragma once
// The engine's step loop without threads (nano-vllm's LLMEngine.step): the scheduler plans, the model
// runner computes, the sequences apply the stop rule and commit. The threaded DiffusionEngine drives
// it for the server; tests, `dgemma generate` and benchmarks may drive it directly.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/block_manager.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/trace.h"

namespace dgemma {

// Something that happened to a sequence during a step.
struct CoreEvent {
  enum class Kind { kCanvas, kPreview, kError };
  Sequence* seq = nullptr;
  Kind kind = Kind::kCanvas;
  std::vector<int32_t> tokens;  // kCanvas: newly returned tokens; kPreview: the argmax canvas
  std::vector<float> logprobs;
  TopAlternatives top;            // kCanvas with params().top_logprobs: the returned tokens' rows
  std::vector<uint8_t> pinned;    // kCanvas of a request with pins: per token, 1 = pinned
  std::vector<float> entropy;     // kPreview: per position of the step (when the runner knows it)
  std::vector<uint8_t> accepted;  // kPreview: decide's acceptance mask of the step
  int steps = 0;
  double denoise_ms = 0;
  bool finished = false;  // kCanvas: the sequence is done (its pages are already freed)
  std::string message;    // kError: why the sequence failed (it is finished, its pages freed)
};

struct StepStats {
  int denoise_items = 0;
  int encode_items = 0;
  int64_t tokens = 0;
  int preempted = 0;
};

class EngineCore {
 public:
  EngineCore(SchedulerConfig scheduler, BlockManagerConfig blocks, std::unique_ptr<ModelRunner> runner);

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
  Scheduler& scheduler() { return scheduler_; }
  const Scheduler& scheduler() const { return scheduler_; }
  BlockManager& blocks() { return blocks_; }
  ModelRunner& runner() { return *runner_; }

 private:
  BlockManager blocks_;
  Scheduler scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  TraceSink* trace_ = nullptr;
  std::function<void(const StepPlan&)> plan_hook_;
};

}  // namespace dgemma
