#pragma once
// The model-backed engine: one engine thread owns the model, the device and the EngineCore; every step
// batches the work of all running requests (prefill chunks, commits, denoising canvases) into one
// forward pass. Up to --max-num-seqs requests run at once, as the KV pool's pages allow; more wait in
// a FIFO queue bounded by --max-queue.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/engine_config.h"
#include "engine/engine_core.h"
#include "engine/kv_pool.h"
#include "engine/model_core.h"
#include "engine/request.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/tensor_parallel.h"

namespace dgemma {

// How the engine is sized (from the memory plan).
struct EngineSizing {
  int64_t max_model_len = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t prefill_chunk = 0;
  KvPoolPlan kv;
  // The memory plan's step ceiling (buffers + workspace): with a non-zero value the engine caps the
  // backend's allocator at what it holds once the pool is allocated + this (memory_plan.h).
  uint64_t step_ceiling_bytes = 0;
  uint64_t graph_pool_bytes = 0;  // the plan's CUDA graph pool (0: no graphs), on top of the step ceiling
  uint64_t runtime_reserve_bytes = 0;  // the plan's allowance outside the allocator (checked by the warm-up)
  uint64_t outside_allocator_bytes = 0;  // device memory in use outside the allocator when the plan was made
};

// The prompt length of the warm-up's last batch of `batch` sequences (the memory plan's profile run):
// a share of the step budget each, so that together they fill a whole step, within max_model_len and
// the pool (each also takes its output canvas and a partial page); never below `floor` tokens.
int64_t warm_up_profile_prompt_len(const EngineSizing& sizing, int64_t canvas_length, int batch, int64_t floor);
// The batch sizes the warm-up runs and the CUDA graphs are recorded for: 1, 2, 4, ... below
// max_num_seqs, then max_num_seqs.
std::vector<int> engine_batch_buckets(int max_num_seqs);

class DiffusionEngine final : public EngineInterface {
 public:
  // Takes ownership of the backend and model; allocates the KV pool; starts the engine thread.
  DiffusionEngine(const EngineConfig& config, std::unique_ptr<Backend> backend, std::unique_ptr<DiffusionGemma> model,
                  GenerationConfig generation, EngineSizing sizing);
  // A tensor-parallel model (its ranks, their backends and collectives), owned likewise.
  DiffusionEngine(const EngineConfig& config, std::unique_ptr<TensorParallelModel> model, GenerationConfig generation,
                  EngineSizing sizing);
  // The same engine over another runner (the scripted runner of the end-to-end tests): the KV pool is
  // page bookkeeping only, sized by `sizing` for `model_config`.
  DiffusionEngine(const EngineConfig& config, std::unique_ptr<ModelRunner> runner, ModelConfig model_config,
                  GenerationConfig generation, EngineSizing sizing);
  ~DiffusionEngine() override;

  std::shared_ptr<RequestStream> submit(GenerationRequest request) override;
  EngineStats stats() const override;
  int64_t max_model_len() const override { return sizing_.max_model_len; }
  int vocab_size() const override { return static_cast<int>(model_config_.text.vocab_size); }

  const ModelConfig& model_config() const { return model_config_; }
  const GenerationConfig& generation_config() const { return generation_; }
  // Resolves request parameters against the model's generation config; throws Error(kInvalidArgument).
  SequenceParams resolve(const SamplingParams& p, uint64_t request_id) const;
  // Traces of requests whose params ask for them (tests, --dump); set before submitting.
  void set_trace_sink(TraceSink* sink) { trace_ = sink; }

 private:
  struct Entry {
    std::unique_ptr<Sequence> seq;
    std::shared_ptr<RequestStream> stream;
  };
  void warm_up();  // one-time start-up costs paid before the first request (CUDA backend)
  void record_graphs();  // CUDA graphs of the denoising steps (unless --enforce-eager)
  void cap_allocator();  // the memory plan's ceiling on the backend's allocator
  void start();
  void loop();
  void finish(Entry& e, FinishReason reason, const std::string& error = {});

  EngineConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<DiffusionGemma> model_;
  std::unique_ptr<TensorParallelModel> tp_model_;  // instead of backend_ and model_ under tensor parallelism
  ModelConfig model_config_;
  GenerationConfig generation_;
  EngineSizing sizing_;
  std::unique_ptr<ModelCore> model_core_;  // the model path: core, runner and KV pool
  std::unique_ptr<EngineCore> own_core_;   // a given runner
  EngineCore* core_ = nullptr;
  TraceSink* trace_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> incoming_;  // submitted, not yet seen by the engine thread
  std::vector<Entry> active_;   // engine thread only: in the core (waiting or running)
  std::atomic<int64_t> running_count_{0}, waiting_count_{0};
  std::atomic<double> kv_usage_{0};
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> cancelled_{0}, steps_{0}, preemptions_{0}, prefix_queries_{0}, prefix_hits_{0};
  std::thread thread_;
};

}  // namespace dgemma
