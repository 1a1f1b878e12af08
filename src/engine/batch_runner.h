#pragma once
// Runs engine steps: one batched forward over the work of several sequences (prefill chunks, commits,
// denoising canvases), then the sampler decisions of each sequence. No threads: the engine loop drives
// it, and tests drive it directly.
#include <cstdint>
#include <span>
#include <vector>

#include "engine/sequence.h"
#include "model/diffusion_gemma.h"

namespace dgemma {

// Something that happened to a sequence during a step.
struct SequenceEvent {
  enum class Kind { kCanvas, kPreview };
  Sequence* seq = nullptr;
  Kind kind = Kind::kCanvas;
  std::vector<int32_t> tokens;    // kCanvas: newly returned tokens; kPreview: the argmax canvas
  std::vector<float> logprobs;
  int steps = 0;
  double denoise_ms = 0;
  bool finished = false;
};

struct StepStats {
  int denoise_items = 0;
  int encode_items = 0;
  int64_t tokens = 0;
  double forward_ms = 0;
  double sampler_ms = 0;
};

class BatchRunner {
 public:
  BatchRunner(DiffusionGemma& model, int64_t max_num_batched_tokens, int64_t prefill_chunk);

  // Prepares a sequence whose kv / logits / soft_embeds buffers are attached (resets the cache).
  void start(Sequence& seq);
  // One step for the given (unfinished) sequences; appends what happened to `events`.
  StepStats step(std::span<Sequence* const> seqs, std::vector<SequenceEvent>& events);

  int64_t prefill_chunk() const { return prefill_chunk_; }
  // Whether a prompt's last prefill chunk may share its pass with the first denoising step (default
  // on; benchmarks turn it off to time prefill alone).
  void set_fuse_prefill(bool on) { fuse_prefill_ = on; }

 private:
  // What queue_sampling left on the device for after_denoise (beyond the sequence's DeviceState).
  struct QueuedStep {
    float temperature = 0;
    Tensor accept, argmax_gap, sample_gap;  // traces only
  };
  // Queues one canvas's sampler, self-conditioning GEMM and decide op (its flags into `flags`).
  QueuedStep queue_sampling(Sequence& seq, const Tensor& flags);
  // The host's part once the flags are read: the stop rule, previews, traces and the commit.
  void after_denoise(Sequence& seq, const QueuedStep& q, bool same_argmax, bool confident,
                     std::vector<SequenceEvent>& events);
  void commit(Sequence& seq, std::vector<SequenceEvent>& events, int steps, std::vector<int32_t> committed,
              const std::vector<float>& logprob);
  void begin_canvas(Sequence& seq);

  DiffusionGemma& model_;
  int64_t max_tokens_per_step_;
  int64_t prefill_chunk_;
  bool fuse_prefill_ = true;
  int canvas_;
  int vocab_;
};

}  // namespace dgemma
