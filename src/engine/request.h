#pragma once
// The engine's public request interface: what the API layer submits and what it receives back.
// HTTP threads only ever touch these types; the engine thread owns the model and the device.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace dgemma {

// Per-request diffusion sampling parameters (MODEL.md §1.4, §6). Unset optionals take the model's
// generation_config.json values (or the reference's built-in defaults).
struct SamplingParams {
  int64_t max_tokens = 256;                 // exact cap on returned tokens
  std::optional<int> max_denoising_steps;   // per canvas
  std::optional<double> entropy_bound;
  std::optional<double> t_min;
  std::optional<double> t_max;
  std::optional<int> stability_threshold;
  std::optional<double> confidence_threshold;
  std::optional<uint64_t> seed;             // counter-based RNG seed; random when unset
  bool ignore_eos = false;
  std::vector<int32_t> canvas_ids;          // initial canvas of the first canvas (reference's decoder_input_ids)
  bool previews = false;                    // emit per-step argmax canvas previews
  bool logprobs = false;                    // log-probability of each committed token at its last step
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids (already templated/tokenised)
  SamplingParams params;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);

// One event on a request's stream.
struct RequestEvent {
  enum class Kind {
    kCanvas,    // a committed canvas: tokens (trimmed at EOS / max_tokens), stats
    kPreview,   // a per-step preview (argmax canvas), only when params.previews
    kFinished,  // terminal: reason set; no events follow
    kError,     // terminal: message set
  };
  Kind kind = Kind::kCanvas;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;  // same length as tokens when params.logprobs
  int steps = 0;                // denoising steps used by this canvas / step index of a preview
  double denoise_ms = 0;        // wall time of this canvas's denoising
  FinishReason reason = FinishReason::kNone;
  std::string message;
  int64_t prompt_tokens = 0;    // filled on kFinished
  int64_t completion_tokens = 0;
};

// A single-consumer channel of events for one request. The engine pushes; an HTTP thread pops.
class RequestStream {
 public:
  explicit RequestStream(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

  void push(RequestEvent ev) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(ev));
    }
    cv_.notify_one();
  }
  // Waits up to `timeout` for the next event. Returns false on timeout.
  bool pop(RequestEvent& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
  }
  // Asks the engine to drop this request (client gone, stop string hit). Idempotent.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  uint64_t id_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
};

// Counters the API exposes on /metrics.
struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  double kv_usage = 0;  // 0..1
  int64_t max_num_seqs = 0;
};

// What the API layer needs from an engine. The real one runs the model; tests may script one.
class EngineInterface {
 public:
  virtual ~EngineInterface() = default;
  // Validates and enqueues; throws Error(kInvalidArgument) for a bad request (e.g. context
  // overflow) or Error(kResourceExhausted) when the waiting queue is full.
  virtual std::shared_ptr<RequestStream> submit(GenerationRequest request) = 0;
  virtual EngineStats stats() const = 0;
  virtual int64_t max_model_len() const = 0;
  virtual int vocab_size() const = 0;
};

}  // namespace dgemma
