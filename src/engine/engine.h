#pragma once
// The model-backed engine: one engine thread owns the model and the device; every step batches the
// work of all running requests (prefill chunks, commits, denoising canvases) into one forward pass.
// --max-num-seqs requests run (each in a slot with its own KV cache and work buffers); more wait in
// a FIFO queue bounded by --max-queue.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/batch_runner.h"
#include "engine/engine_config.h"
#include "engine/request.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"

namespace dgemma {

class DiffusionEngine final : public EngineInterface {
 public:
  // Takes ownership of the backend and model; allocates the slots; starts the engine thread.
  DiffusionEngine(const EngineConfig& config, std::unique_ptr<Backend> backend, std::unique_ptr<DiffusionGemma> model,
                  GenerationConfig generation, int64_t max_model_len);
  ~DiffusionEngine() override;

  std::shared_ptr<RequestStream> submit(GenerationRequest request) override;
  EngineStats stats() const override;
  int64_t max_model_len() const override { return max_model_len_; }
  int vocab_size() const override { return static_cast<int>(model_->config().text.vocab_size); }

  const ModelConfig& model_config() const { return model_->config(); }
  const GenerationConfig& generation_config() const { return generation_; }
  // Resolves request parameters against the model's generation config; throws Error(kInvalidArgument).
  SequenceParams resolve(const SamplingParams& p, uint64_t request_id) const;

 private:
  struct Slot {
    SequenceKv kv;
    Tensor logits, soft;
    bool busy = false;
  };
  struct Running {
    std::unique_ptr<Sequence> seq;
    std::shared_ptr<RequestStream> stream;
    int slot = -1;
  };
  struct Waiting {
    std::unique_ptr<Sequence> seq;
    std::shared_ptr<RequestStream> stream;
  };

  void loop();
  void admit();
  void finish(Running& r, FinishReason reason, const std::string& error = {});

  EngineConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<DiffusionGemma> model_;
  GenerationConfig generation_;
  int64_t max_model_len_;
  std::unique_ptr<BatchRunner> runner_;
  std::vector<Slot> slots_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Waiting> waiting_;
  std::vector<Running> running_;  // engine thread only (sizes mirrored in stats)
  std::atomic<int64_t> running_count_{0}, waiting_count_{0};
  std::atomic<double> kv_usage_{0};
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> cancelled_{0}, steps_{0};
  std::thread thread_;
};

}  // namespace dgemma
