#pragma once
// An EngineCore over a model the caller owns, with a KV pool of its own: what tests, GPU checks and
// benchmarks use to step the real engine by hand (the server's DiffusionEngine adds the thread, the
// request queue and the streams around the same core).
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "engine/engine_core.h"
#include "engine/kv_pool.h"
#include "engine/trace.h"
#include "model/diffusion_gemma.h"
#include "model/tensor_parallel.h"

namespace dgemma {

struct ModelCoreOptions {
  int max_num_seqs = 4;
  int64_t max_num_batched_tokens = 4096;
  int64_t prefill_chunk = 512;
  int64_t kv_tokens = 8192;  // tokens the full-attention pages hold (all sequences together)
  std::optional<KvPoolPlan> kv_plan;  // the pool's pages, as the memory plan sized it (overrides kv_tokens)
  bool prefix_caching = true;
  bool fuse_prefill_tail = true;  // SchedulerConfig::fuse_prefill_tail
};

// The one assembly of an engine core: scheduler and page bookkeeping sized by `plan` for `config`
// (page = canvas), over any runner. ModelCore builds the model's with it; the threaded engine over the
// scripted runner uses it too.
std::unique_ptr<EngineCore> make_engine_core(const ModelConfig& config, const ModelCoreOptions& options,
                                             const KvPoolPlan& plan, std::unique_ptr<ModelRunner> runner);

class ModelCore {
 public:
  ModelCore(DiffusionGemma& model, ModelCoreOptions options);
  // A tensor-parallel model: one pool per rank (the rank's KV heads, the same pages), the ranks' runners
  // behind one TensorParallelRunner; runner() is rank 0's.
  ModelCore(TensorParallelModel& model, ModelCoreOptions options);

  EngineCore& core() { return *core_; }
  TraceRecorder& traces() { return traces_; }
  DiffusionModelRunner& runner() { return *runner_; }
  // A sequence for this model (canvas length and vocabulary from its config).
  std::unique_ptr<Sequence> make_sequence(uint64_t id, std::vector<int32_t> prompt, SequenceParams params) const;
  // Adds the sequences and steps until all finished; returns the events of every step. Throws when
  // they do not finish within max_steps.
  std::vector<CoreEvent> run(const std::vector<Sequence*>& seqs, int max_steps = 100000);

 private:
  KvPoolPlan pool_plan(const ModelCoreOptions& o) const;

  DiffusionGemma& model_;
  KvStorage kv_;
  std::vector<KvStorage> rank_kv_;  // tensor parallelism: one pool per rank
  DiffusionModelRunner* runner_ = nullptr;
  std::unique_ptr<EngineCore> core_;
  TraceRecorder traces_;
};

}  // namespace dgemma
