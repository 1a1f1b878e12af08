#pragma once
// A test and benchmark harness: an EngineCore over a model the caller owns (lent to the runner), with
// a KV pool of its own and a trace recorder, to step the real engine by hand (the server's
// DiffusionEngine adds the thread, the request queue and the streams around the same core).
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/diffusion_runner.h"
#include "engine/engine_core.h"
#include "engine/limits.h"
#include "engine/trace.h"
#include "model/diffusion_gemma.h"
#include "model/tensor_parallel.h"

namespace dgemma {

struct ModelCoreOptions {
  int max_num_seqs = 4;
  int64_t max_num_batched_tokens = 4096;
  int64_t prefill_chunk = limits::kMaxPrefillChunk;
  int64_t kv_tokens = 8192;  // tokens the full-attention pages hold (all sequences together)
  bool prefix_caching = true;
  bool fuse_prefill_tail = true;  // SchedulerConfig::fuse_prefill_tail
  RunnerOptions runner;           // CUDA graphs, the attention plans' context
};

class ModelCore {
 public:
  // `model` runs on `backend` (the backend it was built on); both outlive the harness.
  ModelCore(Backend& backend, DiffusionGemma& model, ModelCoreOptions options = {});
  // A tensor-parallel model: one pool per rank (the rank's KV heads, the same pages), the ranks'
  // runners behind one TensorParallelRunner.
  ModelCore(TensorParallelModel& model, ModelCoreOptions options = {});

  EngineCore& core() { return *core_; }
  TraceRecorder& traces() { return traces_; }
  // A sequence for this model (canvas length and vocabulary from its config).
  std::unique_ptr<Sequence> make_sequence(uint64_t id, std::vector<int32_t> prompt,
                                          SequenceParams params) const;
  // One engine step, counted as replayed or op by op.
  StepStats step(std::vector<CoreEvent>& events);
  // Adds the sequences and steps until all finished; returns the events of every step. Throws when
  // they do not finish within max_steps.
  std::vector<CoreEvent> run(const std::vector<Sequence*>& seqs, int max_steps = 100000);
  // Steps replayed from a CUDA graph / run op by op so far, and the batch sizes recorded (a
  // single-rank model).
  int64_t graph_steps() const { return graph_steps_; }
  int64_t eager_steps() const { return eager_steps_; }
  std::vector<int> graph_batches() const {
    return runner_ != nullptr ? runner_->graph_batches() : std::vector<int>{};
  }

 private:
  EngineSizing sizing(const ModelCoreOptions& o) const;
  void start(const EngineSizing& sizing, std::unique_ptr<ModelRunner> runner);

  const ModelConfig& config_;
  DiffusionModelRunner* runner_ = nullptr;  // the single-rank runner (the core owns it)
  std::unique_ptr<EngineCore> core_;
  TraceRecorder traces_;
  int64_t graph_steps_ = 0, eager_steps_ = 0;
};

}  // namespace dgemma
