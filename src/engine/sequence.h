#pragma once
// One request's state machine: WAITING -> PREFILL -> DENOISE <-> (COMMIT) -> FINISHED, and back to
// WAITING when the scheduler preempts it (its cache is dropped and rebuilt later from its history; the
// counter-based RNG makes the restarted canvas identical). The history — prompt, then every committed
// canvas that continues the answer — is what the KV cache must hold before the current canvas; a
// committed canvas is encoded together with the next canvas's first denoising step.
// These methods are the one place where a canvas is trimmed at EOS / stop ids / max_tokens (a canvas of
// nothing but pad ends the answer as an EOS would), and where pinned spans are laid on the canvas and
// dropped filler is decided (docs/MODEL.md §6.6), and where a guided value is closed (guided_answer.h).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/block_manager.h"
#include "engine/denoise_policy.h"
#include "engine/guided_answer.h"
#include "engine/params.h"
#include "engine/pins.h"
#include "engine/request.h"

namespace dgemma {

// The top-n alternatives of every position of one step's canvas, row-major [C, n].
struct TopAlternatives {
  int n = 0;
  std::vector<int32_t> ids;
  std::vector<float> logprobs;
};

// What a committed canvas gives the client.
struct CanvasCommit {
  std::vector<int32_t> canvas;  // the whole committed canvas: the argmax with its pinned tokens
  std::vector<int32_t> tokens;  // trimmed at EOS / stop id / max_tokens, gap filler dropped
  std::vector<float> logprobs;
  TopAlternatives top;          // the rows of the returned tokens (params().top_logprobs > 0)
  std::vector<uint8_t> pinned;  // requests with pins: per token, 1 = a pinned token
  int steps = 0;
  double denoise_ms = 0;
  bool finished = false;
};

class Sequence {
 public:
  enum class State { kWaiting, kPrefill, kDenoise, kFinished };

  Sequence(uint64_t id, std::vector<int32_t> prompt, SequenceParams params, int canvas_length, int vocab);

  uint64_t id() const { return id_; }
  const SequenceParams& params() const { return params_; }
  const std::vector<int32_t>& history() const { return history_; }
  // The prompt's images (checked by the engine) and the blocks of soft tokens they fill: `soft` each.
  void set_images(std::vector<PromptImage> images, std::vector<int64_t> soft);
  const std::vector<PromptImage>& images() const { return images_; }
  int64_t image_soft_tokens(size_t i) const { return soft_[i]; }
  // The history as the prefix cache keys it: the image tokens of an image block replaced by words of
  // its image's digest (negative, so never a token id), so equal keys mean equal pixels.
  std::span<const int32_t> cache_keys() const {
    return images_.empty() ? std::span<const int32_t>(history_) : keys_;
  }
  // `end` moved so that history [begin, end) cuts no image block: back to a block's start, or when the
  // block starts at `begin`, past its end.
  int64_t chunk_end(int64_t begin, int64_t end) const;
  // Whether history position `pos` lies strictly inside an image block (a cached prefix may not end there).
  bool inside_image(int64_t pos) const;
  int64_t prompt_len() const { return prompt_len_; }
  int canvas_length() const { return canvas_; }

  // --- cache and scheduling state (the scheduler's) ---
  State state = State::kWaiting;
  int64_t encoded = 0;   // history tokens in the KV cache
  SequenceBlocks blocks;
  int64_t cached_tokens = 0;  // prompt tokens the prefix cache served at first admission
  bool admitted_once = false;
  int64_t pending() const { return static_cast<int64_t>(history_.size()) - encoded; }

  // --- the denoising loop ---
  int canvas_index() const { return canvas_index_; }
  int step() const { return step_; }
  // Starts the current canvas (step 0); its tokens come from initial_canvas().
  void begin_canvas(double now);
  // The first canvas of canvas_index(): the request's canvas_ids for canvas 0, else counter-RNG tokens;
  // pinned positions hold their pinned tokens.
  std::vector<int32_t> initial_canvas() const;
  // The pinned positions of the current canvas (empty for most requests).
  const CanvasPins& canvas_pins() const { return pins_; }
  float temperature() const { return temperature_at(params_.diffusion, step_); }
  // Guided decoding: the current canvas's part of the value and the automaton state it starts in.
  GuidedSegment guided_segment() const;
  int32_t guided_state() const { return guided_state_; }
  // After a denoising step: the stop rule from decide's two flags. Returns true when this was the
  // canvas's last step (stable and confident, or the step cap).
  bool on_step(bool same_argmax, bool confident);
  // What on_step would return for these flags, without counting the step (what a runner reads back).
  bool last_step(bool same_argmax, bool confident) const;
  // The argmax canvas of a step of the current canvas as it is shown: pinned positions hold their
  // pinned tokens (the one place pins are laid on a step's result; commit lays them too).
  std::vector<int32_t> shown_canvas(std::vector<int32_t> argmax) const;
  // Commits the last step's argmax canvas (pinned positions: their pinned tokens): trims it, appends it
  // to the history when the answer goes on (and begins the next canvas), or finishes.
  CanvasCommit commit(const std::vector<int32_t>& argmax, const std::vector<float>& logprobs, double now,
                      const TopAlternatives& top = TopAlternatives{});
  // Back to WAITING with an empty cache (the caller frees its pages); the current canvas restarts.
  void preempt();
  void finish(FinishReason reason) {
    state = State::kFinished;
    finish_ = reason;
  }

  // --- results ---
  const std::vector<int32_t>& output() const { return output_; }
  const std::vector<float>& output_logprobs() const { return output_logprobs_; }
  FinishReason finish_reason() const { return finish_; }
  int32_t stop_token_id() const { return stop_token_id_; }
  int64_t denoise_steps_total() const { return denoise_steps_total_; }
  int canvases_committed() const { return canvas_index_; }
  double submit_time = 0, admit_time = 0, prefill_done_time = 0;

 private:
  uint64_t id_;
  SequenceParams params_;
  int canvas_, vocab_;
  int64_t prompt_len_;
  std::vector<int32_t> history_;
  std::vector<PromptImage> images_;
  std::vector<int64_t> soft_;
  std::vector<int32_t> keys_;  // cache_keys() when there are images
  int canvas_index_ = 0;
  int step_ = 0;
  StabilityRun stability_;
  double canvas_start_ = 0;
  std::vector<int32_t> output_;
  std::vector<float> output_logprobs_;
  FinishReason finish_ = FinishReason::kNone;
  int32_t stop_token_id_ = -1;
  int64_t denoise_steps_total_ = 0;
  CanvasPins pins_;       // of canvas_index_
  int64_t pins_end_ = 0;  // answer position after the last pinned one
  int32_t guided_state_ = 0;  // guided decoding: the automaton state at the current canvas's segment
};

}  // namespace dgemma
