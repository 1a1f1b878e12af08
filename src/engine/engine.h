#pragma once
// The threaded engine: one engine thread drives an EngineCore (which owns the runner and with it the
// model and the device); every step batches the work of all running requests (prefill chunks,
// commits, denoising canvases) into one forward pass. Up to --max-num-seqs requests run at once, as
// the KV pool's pages allow; more wait in a FIFO queue bounded by --max-queue. This class keeps the
// thread, the request queue, cancellation and the statistics. A FatalError from a step (a
// tensor-parallel rank died) ends every request with its message and stops the engine: failure() says
// why and submit() refuses new requests (503).
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "engine/engine_config.h"
#include "engine/engine_core.h"
#include "engine/request.h"
#include "model/config.h"

namespace dgemma {

class DiffusionEngine final : public EngineInterface {
 public:
  // Takes the core (prepared: engine_factory.cpp) and starts the engine thread. `config` gives the
  // queue bound and the seed of requests without their own; `generation` the defaults requests
  // resolve against.
  DiffusionEngine(const EngineConfig& config, std::unique_ptr<EngineCore> core, GenerationConfig generation);
  ~DiffusionEngine() override;

  std::shared_ptr<RequestStream> submit(GenerationRequest request) override;
  EngineStats stats() const override;
  int64_t max_model_len() const override { return core_->max_model_len(); }
  int vocab_size() const override { return core_->vocab_size(); }
  ImageSupport image_support() const override { return images_; }
  std::string failure() const override;
  // Turns image input on (the model's vision tower is loaded); before the first submit.
  void set_image_support(const ImageSupport& s) { images_ = s; }

 private:
  struct Entry {
    std::unique_ptr<Sequence> seq;
    std::shared_ptr<RequestStream> stream;
  };
  SequenceParams resolve(const SamplingParams& p, uint64_t request_id) const;
  ImageSupport images_;
  void loop();
  // The core's counts, published for submit() and stats() (under mu_).
  void publish();
  void finish(Entry& e, FinishReason reason, const std::string& error = {});
  // A FatalError from a step: every request ends with it, the engine stops taking work.
  void stop_for_good(const std::string& why);

  const int max_queue_;
  const uint64_t seed_;
  const std::unique_ptr<EngineCore> core_;
  const GenerationConfig generation_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> incoming_;  // submitted, not yet seen by the engine thread
  CoreCounts counts_;           // the core's, as last published
  std::string failure_;         // set once, by stop_for_good
  std::unordered_map<uint64_t, Entry> active_;  // engine thread only: in the core (waiting or running)
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> cancelled_{0}, steps_{0};
  std::thread thread_;
};

}  // namespace dgemma
