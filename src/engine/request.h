#pragma once
// The engine's public request interface: what the API layer submits and what it receives back.
// HTTP threads only ever touch these types; the engine thread owns the model and the device.
#include <array>
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

namespace guided {
class TokenConstraint;
}

// Guided decoding (docs/API.md "Guided decoding on the canvas"): answer positions [begin, end) hold one
// value of `constraint`, written left to right with filler (pad, end-of-sequence) anywhere in between;
// the answer ends right after the value, followed by `suffix` (e.g. a tool call's closing marker).
// Pinned spans may lie inside [begin, end) (the value's fixed opening): they are walked like any token.
struct GuidedAnswer {
  std::shared_ptr<const guided::TokenConstraint> constraint;
  int64_t begin = 0;
  int64_t end = 0;
  std::vector<int32_t> suffix;
};

// A run of answer positions whose tokens are given and never renoised (pinned spans, docs/API.md).
// `offset` counts answer positions from the first generated token: canvas k covers answer positions
// [k * canvas_length, (k + 1) * canvas_length), so a span lies in one canvas or is split across
// consecutive ones. A pinned position always keeps its token, counts as accepted, and feeds its one-hot
// token to self-conditioning; the entropy bound and the stop rule see only the free positions.
struct PinnedSpan {
  int64_t offset = 0;
  std::vector<int32_t> tokens;
};

// Per-request diffusion sampling parameters (docs/MODEL.md §1.4, §6). Unset optionals take the model's
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
  int top_logprobs = 0;                     // with logprobs: that many most likely tokens per position, 0..20
  // vLLM's filters, restricting the support of the per-position sample (docs/API.md, docs/MODEL.md
  // §6.7); unset = off. They never change entropies, the argmax or the committed canvas directly.
  std::optional<int> top_k;                 // -1 / 0: off
  std::optional<double> top_p;              // (0, 1]; 1: off
  std::optional<double> min_p;              // [0, 1]; 0: off
  // OpenAI `temperature` (added by the API layer; see docs/API.md): unset or 1 = the checkpoint's
  // t_min/t_max schedule; T > 0 multiplies both t_min and t_max by T; T == 0 means greedy: the
  // per-position sample is the argmax (no sampling noise) while entropies use the unscaled schedule.
  std::optional<double> temperature;
  // Extra stop ids (vLLM `stop_token_ids`): treated like EOS ids, also under ignore_eos (canvas trimmed
  // before the id, finish reason stop, kFinished.stop_token_id set). The API layer also enforces them
  // on what it receives, so honouring them in the engine only saves work.
  std::vector<int32_t> stop_token_ids;
  // Pinned spans of the answer (infilling, assistant prefill, forced tool-call or JSON openings).
  std::vector<PinnedSpan> pins;
  // Guided decoding of the answer (nullptr: none).
  std::shared_ptr<const GuidedAnswer> guided;
};

// An image of a prompt: its soft tokens take the prompt's positions [first, first + soft tokens), which
// hold the image token (the <|image> ... <image|> markers around them are ordinary tokens). `patches`
// are the processor's uint8 patches (image/image_processor.h) of a grid_h x grid_w grid; `digest`
// identifies the pixels (SHA-256 of the grid and patches) so that the prefix cache never shares the
// pages of two different images.
struct PromptImage {
  int64_t first = 0;
  int64_t grid_h = 0, grid_w = 0;
  std::shared_ptr<const std::vector<uint8_t>> patches{};
  std::array<uint8_t, 32> digest{};
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids (already templated/tokenised)
  SamplingParams params;
  std::vector<PromptImage> images{};  // ascending, disjoint (the engine checks them against the prompt)
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
  // With params.top_logprobs = N > 0: per token, the N most likely tokens of the step that committed it
  // and their log-probabilities (row-major, tokens.size() x N; descending, the token itself first).
  int top_n = 0;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
  // kCanvas of a request with pins: same length as tokens, 1 where the token is a pinned one (gap
  // filler is already dropped from tokens, so this is how a client of the engine tells gaps apart).
  std::vector<uint8_t> pinned;
  // kPreview from the model engine: per canvas position, the step's entropy and whether the step
  // accepted it (kept its sample; the others were renoised). Empty when the runner does not know them.
  std::vector<float> entropy;
  std::vector<uint8_t> accepted;
  int steps = 0;                // denoising steps used by this canvas / step index of a preview
  double denoise_ms = 0;        // wall time of this canvas's denoising
  FinishReason reason = FinishReason::kNone;
  std::string message;
  int64_t prompt_tokens = 0;    // filled on kFinished
  int64_t completion_tokens = 0;
  // Filled on kFinished when known (engine timestamps, vLLM's metric definitions): time spent waiting
  // in the queue, in prefill, and from the end of prefill to the end of the request. 0 if unknown.
  double queue_ms = 0;
  double prefill_ms = 0;
  double decode_ms = 0;
  int64_t cached_tokens = 0;    // prompt tokens served from the prefix cache
  // kFinished with kStop: the params.stop_token_ids entry that ended the output (reported to clients
  // as stop_reason); -1 for an EOS id or anything else.
  int32_t stop_token_id = -1;
};

// Lets one consumer wait on several RequestStreams at once (n > 1, several prompts): every push()
// on a stream with a waker bumps the waker's sequence number.
class StreamWaker {
 public:
  void notify() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++seq_;
    }
    cv_.notify_all();
  }
  uint64_t seq() {
    std::lock_guard<std::mutex> lock(mu_);
    return seq_;
  }
  // Waits until the sequence differs from `seen` or the timeout passes; returns the current sequence.
  uint64_t wait(uint64_t seen, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return seq_ != seen; });
    return seq_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t seq_ = 0;
};

// A single-consumer channel of events for one request. The engine pushes; an HTTP thread pops.
class RequestStream {
 public:
  explicit RequestStream(uint64_t id) : id_(id) {}
  uint64_t id() const { return id_; }

  void push(RequestEvent ev) {
    std::shared_ptr<StreamWaker> waker;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ev.kind == RequestEvent::Kind::kFinished || ev.kind == RequestEvent::Kind::kError) ended_ = true;
      events_.push_back(std::move(ev));
      waker = waker_;
    }
    cv_.notify_one();
    if (waker) waker->notify();
  }
  // Set by the consumer before the request is submitted.
  void set_waker(std::shared_ptr<StreamWaker> waker) {
    std::lock_guard<std::mutex> lock(mu_);
    waker_ = std::move(waker);
  }
  // Non-blocking pop. Returns false when no event is queued.
  bool try_pop(RequestEvent& out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (events_.empty()) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
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
  // Whether the engine has pushed the terminal event (kFinished / kError), popped or not.
  bool ended() const { return ended_; }

 private:
  uint64_t id_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> ended_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestEvent> events_;
  std::shared_ptr<StreamWaker> waker_;
};

// What the engine accepts in a prompt's images (max_per_prompt 0: a text-only deployment).
struct ImageSupport {
  int max_per_prompt = 0;
  int32_t image_token_id = -1, boi_token_id = -1, eoi_token_id = -1;
  int patch_size = 16, pooling_kernel_size = 3;
  int max_soft_tokens = 280;     // the processor's budget per image (processor_config.json)
  int64_t max_block_tokens = 0;  // soft tokens an image may have: its block is encoded in one prefill chunk
};

// Counters the API exposes on /metrics.
struct EngineStats {
  int64_t running = 0;
  int64_t waiting = 0;
  double kv_usage = 0;  // 0..1
  int64_t max_num_seqs = 0;
  int64_t max_queue = 0;            // waiting requests accepted before submit() throws kResourceExhausted
  int64_t requests_cancelled = 0;   // requests dropped after cancel(), queued or running (cumulative)
  int64_t num_preemptions = 0;      // cumulative
  int64_t prefix_cache_queries = 0; // cumulative, in tokens
  int64_t prefix_cache_hits = 0;    // cumulative, in tokens
  int64_t engine_steps = 0;         // cumulative forward passes of the engine loop
  int canvas_length = 0;
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
  virtual ImageSupport image_support() const { return {}; }
  // Why the engine stopped for good (a FatalError: util/fatal_error.h), empty while it serves. Once set,
  // its requests have ended with that error and submit() refuses new ones.
  virtual std::string failure() const { return {}; }
};

}  // namespace dgemma
