#include "engine/sequence.h"

#include <algorithm>

#include "backend/decide_rules.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {

Sequence::Sequence(uint64_t id, std::vector<int32_t> prompt, SequenceParams params, int canvas_length, int vocab)
    : id_(id),
      params_(std::move(params)),
      canvas_(canvas_length),
      vocab_(vocab),
      prompt_len_(static_cast<int64_t>(prompt.size())),
      history_(std::move(prompt)),
      stability_(params_.diffusion.stability_threshold) {
  DG_CHECK(canvas_ > 0 && vocab_ > 0 && !history_.empty());
  DG_CHECK(params_.initial_canvas.empty() || static_cast<int>(params_.initial_canvas.size()) == canvas_);
}

void Sequence::begin_canvas(double now) {
  step_ = 0;
  stability_ = StabilityRun(params_.diffusion.stability_threshold);
  canvas_start_ = now;
}

std::vector<int32_t> Sequence::initial_canvas() const {
  if (canvas_index_ == 0 && !params_.initial_canvas.empty()) return params_.initial_canvas;
  return random_canvas(params_.seed, static_cast<uint64_t>(canvas_index_), 0, rng::kInitCanvas, canvas_, vocab_);
}

bool Sequence::on_step(bool same_argmax, bool confident) {
  const bool stable = stability_.update(same_argmax);
  const bool last = (stable && confident) || step_ + 1 >= params_.diffusion.max_denoising_steps;
  step_ += 1;
  denoise_steps_total_ += 1;
  return last;
}

CanvasCommit Sequence::commit(const std::vector<int32_t>& committed, const std::vector<float>& logprob, double now,
                              const TopAlternatives& top) {
  DG_CHECK(static_cast<int>(committed.size()) == canvas_);
  // Returned tokens stop before the first EOS id (the reference keeps it and pads after; clients get
  // text up to it and finish_reason "stop"), and never exceed max_tokens.
  int n = canvas_;
  bool eos = false;
  auto is_in = [](const std::vector<int32_t>& ids, int32_t t) { return std::find(ids.begin(), ids.end(), t) != ids.end(); };
  for (int p = 0; p < canvas_ && !eos; ++p) {
    const bool stop_id = is_in(params_.stop_ids, committed[p]);
    if (stop_id || (!params_.ignore_eos && is_in(params_.eos_ids, committed[p]))) {
      n = p;
      eos = true;
      if (stop_id) stop_token_id_ = committed[p];
    }
  }
  const int64_t room = params_.max_tokens - static_cast<int64_t>(output_.size());
  bool length = false;
  if (n > room || (!eos && n == room)) {
    length = !eos || n > room;
    if (n > room) eos = false;
    n = static_cast<int>(std::max<int64_t>(0, room));
  }
  CanvasCommit c;
  c.tokens.assign(committed.begin(), committed.begin() + n);
  if (params_.logprobs) {
    DG_CHECK(static_cast<int>(logprob.size()) == canvas_);
    c.logprobs.assign(logprob.begin(), logprob.begin() + n);
  }
  if (params_.top_logprobs > 0 && top.n > 0) {  // n = 0: a runner that does not compute them
    const size_t k = static_cast<size_t>(top.n);
    DG_CHECK(top.n == params_.top_logprobs && top.ids.size() == k * canvas_ && top.logprobs.size() == k * canvas_);
    c.top.n = top.n;
    c.top.ids.assign(top.ids.begin(), top.ids.begin() + static_cast<ptrdiff_t>(k * n));
    c.top.logprobs.assign(top.logprobs.begin(), top.logprobs.begin() + static_cast<ptrdiff_t>(k * n));
  }
  c.steps = step_;
  c.denoise_ms = (now - canvas_start_) * 1e3;
  output_.insert(output_.end(), c.tokens.begin(), c.tokens.end());
  output_logprobs_.insert(output_logprobs_.end(), c.logprobs.begin(), c.logprobs.end());
  canvas_index_ += 1;
  if (eos || length) {
    finish(eos ? FinishReason::kStop : FinishReason::kLength);
    c.finished = true;
  } else {
    // The whole argmax canvas (not the trimmed part) conditions the next one, as in the reference.
    history_.insert(history_.end(), committed.begin(), committed.end());
    begin_canvas(now);
  }
  return c;
}

void Sequence::preempt() {
  state = State::kWaiting;
  encoded = 0;
  step_ = 0;
  stability_ = StabilityRun(params_.diffusion.stability_threshold);
}

}  // namespace dgemma
