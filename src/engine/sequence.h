#pragma once
// One request's state machine: PREFILL -> DENOISE <-> (COMMIT) -> FINISHED (docs/ARCHITECTURE.md,
// src/engine). The commit of a canvas is encoded together with the next canvas's first
// denoising step in the same forward pass.
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/tensor.h"
#include "engine/request.h"
#include "engine/params.h"
#include "engine/denoise_policy.h"
#include "model/kv_cache.h"

namespace dgemma {

// What one denoising step decided (kept when params.trace).
struct StepRecord {
  std::vector<int32_t> canvas_in, argmax, sample, canvas_out;
  std::vector<float> entropy;
  std::vector<uint8_t> accept;
  std::vector<float> argmax_gap, sample_gap;  // decision margins (trace only)
  std::vector<float> accept_margin;           // |prefix entropy sum - bound| per position
  float temperature = 0;
  bool stop = false;
};

struct CanvasRecord {
  int index = 0;
  int steps = 0;
  double denoise_ms = 0;
  std::vector<int32_t> committed;  // the full argmax canvas
  std::vector<StepRecord> trace;
};

class Sequence {
 public:
  enum class State { kPrefill, kDenoise, kFinished };

  Sequence(uint64_t id, std::vector<int32_t> prompt, SequenceParams params)
      : id(id), prompt(std::move(prompt)), params(std::move(params)),
        stability(this->params.diffusion.stability_threshold) {}

  // The denoising loop's state on the model's backend (allocated by BatchRunner::start): the canvas
  // never leaves the device between steps; the host reads two flags per step and the argmax canvas at
  // a commit.
  struct DeviceState {
    Tensor canvas;       // i32 [C] the current (noisy) canvas
    Tensor prev_argmax;  // i32 [C] the previous step's argmax canvas
    Tensor entropy, argmax, sample, logprob;  // the sampler's outputs of the current step
  };

  uint64_t id;
  std::vector<int32_t> prompt;
  SequenceParams params;
  State state = State::kPrefill;
  SequenceKv* kv = nullptr;   // owned by the runner's slot
  Tensor logits;              // [C, V] bf16 work buffer (slot-owned)
  Tensor soft_embeds;         // [C, H] bf16 self-conditioning input (slot-owned)
  int64_t prefilled = 0;      // prompt tokens encoded

  int canvas_index = 0;
  int step = 0;               // executed steps in the current canvas
  bool have_soft = false;     // soft_embeds holds the previous step's signal
  DeviceState dev;
  std::vector<int32_t> pending_commit;  // committed canvas waiting to be encoded
  StabilityRun stability;
  double canvas_start = 0;

  std::vector<int32_t> output;          // returned tokens (trimmed at EOS / max_tokens)
  std::vector<float> output_logprobs;
  FinishReason finish = FinishReason::kNone;
  int32_t stop_token_id = -1;           // the stop_ids entry that ended the output
  double submit_time = 0, admit_time = 0, prefill_done_time = 0;
  std::vector<CanvasRecord> canvases;   // one per committed canvas
  int64_t denoise_steps_total = 0;
};

}  // namespace dgemma
