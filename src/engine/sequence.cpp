#include "engine/sequence.h"

#include <algorithm>

#include "guided/token_constraint.h"
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
  pins_ = dgemma::canvas_pins(params_.pins, 0, canvas_);
  pins_end_ = dgemma::pins_end(params_.pins);
  if (params_.guided) guided_state_ = params_.guided->constraint->start();
}

GuidedSegment Sequence::guided_segment() const {
  if (!params_.guided) return {};
  return dgemma::guided_segment(*params_.guided, canvas_index_, canvas_);
}

void Sequence::set_images(std::vector<PromptImage> images, std::vector<int64_t> soft) {
  DG_CHECK(images.size() == soft.size() && history_.size() == static_cast<size_t>(prompt_len_));
  images_ = std::move(images);
  soft_ = std::move(soft);
  keys_.clear();
  if (images_.empty()) return;
  keys_ = history_;
  for (size_t i = 0; i < images_.size(); ++i) {
    const PromptImage& im = images_[i];
    DG_CHECK(im.first >= 0 && im.first + soft_[i] <= prompt_len_);
    for (int64_t j = 0; j < soft_[i]; ++j) {
      // Eight words of the digest in turn, 31 bits each: a block of 8+ tokens keys all 248 of them.
      const size_t w = static_cast<size_t>(j % 8) * 4;
      uint32_t v = 0;
      for (int b = 0; b < 4; ++b) v = (v << 8) | im.digest[w + static_cast<size_t>(b)];
      keys_[static_cast<size_t>(im.first + j)] = -1 - static_cast<int32_t>(v & 0x7fffffffu);
    }
  }
}

int64_t Sequence::chunk_end(int64_t begin, int64_t end) const {
  for (size_t i = 0; i < images_.size(); ++i) {
    const int64_t f = images_[i].first, e = f + soft_[i];
    if (f < end && end < e) return f > begin ? f : e;
  }
  return end;
}

bool Sequence::inside_image(int64_t pos) const {
  for (size_t i = 0; i < images_.size(); ++i)
    if (images_[i].first < pos && pos < images_[i].first + soft_[i]) return true;
  return false;
}

void Sequence::begin_canvas(double now) {
  step_ = 0;
  stability_ = StabilityRun(params_.diffusion.stability_threshold);
  canvas_start_ = now;
}

std::vector<int32_t> Sequence::initial_canvas() const {
  std::vector<int32_t> c = canvas_index_ == 0 && !params_.initial_canvas.empty()
                               ? params_.initial_canvas
                               : random_canvas(params_.seed, static_cast<uint64_t>(canvas_index_), 0, rng::kInitCanvas, canvas_, vocab_);
  apply_pins(pins_, c);
  return c;
}

bool Sequence::last_step(bool same_argmax, bool confident) const {
  return (stability_.stable_after(same_argmax) && confident) ||
         step_ + 1 >= params_.diffusion.max_denoising_steps;
}

bool Sequence::on_step(bool same_argmax, bool confident) {
  const bool last = last_step(same_argmax, confident);
  stability_.update(same_argmax);
  step_ += 1;
  denoise_steps_total_ += 1;
  return last;
}

std::vector<int32_t> Sequence::shown_canvas(std::vector<int32_t> argmax) const {
  DG_CHECK(static_cast<int>(argmax.size()) == canvas_);
  apply_pins(pins_, argmax);
  return argmax;
}

CanvasCommit Sequence::commit(const std::vector<int32_t>& argmax, const std::vector<float>& logprob, double now,
                              const TopAlternatives& top) {
  std::vector<int32_t> committed = shown_canvas(argmax);  // a pinned position commits its pinned token
  // Guided decoding: the canvas's part of the value made valid; filler inside the region is dropped
  // below like a gap's, and a complete value ends the answer (then its suffix follows).
  GuidedCommit guided;
  int64_t filler_end = pins_end_;
  if (params_.guided) {
    guided = guide_canvas(*params_.guided, canvas_index_, guided_state_, committed, params_.pad_id, pins_.mask);
    guided_state_ = guided.state;
    filler_end = std::max(filler_end, guided.done ? guided.value_end : params_.guided->end);
  }
  if (params_.logprobs) DG_CHECK(static_cast<int>(logprob.size()) == canvas_);
  // Alternatives (n = 0: a runner that does not compute them).
  const bool want_top = params_.top_logprobs > 0 && top.n > 0;
  const size_t k = static_cast<size_t>(top.n);
  if (want_top)
    DG_CHECK(top.n == params_.top_logprobs && top.ids.size() == k * canvas_ && top.logprobs.size() == k * canvas_);
  // Returned tokens stop before the first EOS id (the reference keeps it and pads after; clients get
  // text up to it and finish_reason "stop"), and never go past answer position max_tokens. With pins:
  // before the last pinned position an EOS / stop id / pad in a free position is filler (a gap ended
  // early) and is dropped; pinned tokens are never end markers.
  auto is_in = [](const std::vector<int32_t>& ids, int32_t t) { return std::find(ids.begin(), ids.end(), t) != ids.end(); };
  const int64_t base = static_cast<int64_t>(canvas_index_) * canvas_;
  const bool with_pins = !params_.pins.empty();
  CanvasCommit c;
  bool eos = false, length = false;
  // A canvas of nothing but pad (past every pinned position) ends the answer like an EOS: the reference
  // would go on appending such canvases, which give no text, until max_tokens.
  const auto is_pad = [&](int32_t t) { return t == params_.pad_id; };
  if (!params_.ignore_eos && base >= filler_end && std::all_of(committed.begin(), committed.end(), is_pad))
    eos = true;
  for (int p = 0; p < canvas_ && !eos; ++p) {
    const int64_t a = base + p;
    const int32_t t = committed[p];
    const bool pinned = pins_.pinned(p);
    const bool stop_id = !pinned && is_in(params_.stop_ids, t);
    const bool end = stop_id || (!pinned && !params_.ignore_eos && is_in(params_.eos_ids, t));
    if (guided.done && a >= guided.value_end) {
      eos = true;  // the guided value is complete: the answer ends after it (and its suffix)
      break;
    }
    if (a < filler_end && !pinned && (end || t == params_.pad_id)) continue;
    if (end) {
      eos = true;
      if (stop_id) stop_token_id_ = t;
      break;
    }
    if (a >= params_.max_tokens) {
      length = true;
      break;
    }
    c.tokens.push_back(t);
    if (params_.logprobs) c.logprobs.push_back(pinned ? 0.0f : logprob[p]);
    if (with_pins) c.pinned.push_back(pinned ? 1 : 0);
    if (want_top) {
      // A pinned token was forced (log-probability 0): it is its own only alternative (-1: none).
      c.top.n = top.n;
      for (size_t j = 0; j < k; ++j) {
        c.top.ids.push_back(pinned ? (j == 0 ? t : -1) : top.ids[static_cast<size_t>(p) * k + j]);
        c.top.logprobs.push_back(pinned ? 0.0f : top.logprobs[static_cast<size_t>(p) * k + j]);
      }
    }
  }
  if (guided.done) {
    eos = true;
    length = false;
    for (int32_t t : params_.guided->suffix) {
      c.tokens.push_back(t);
      if (params_.logprobs) c.logprobs.push_back(0.0f);
      if (with_pins) c.pinned.push_back(1);
      if (want_top) {
        c.top.n = top.n;
        for (size_t j = 0; j < k; ++j) {
          c.top.ids.push_back(j == 0 ? t : -1);
          c.top.logprobs.push_back(0.0f);
        }
      }
    }
  }
  if (!eos && base + canvas_ >= params_.max_tokens) length = true;
  c.canvas = committed;
  c.steps = step_;
  c.denoise_ms = (now - canvas_start_) * 1e3;
  output_.insert(output_.end(), c.tokens.begin(), c.tokens.end());
  output_logprobs_.insert(output_logprobs_.end(), c.logprobs.begin(), c.logprobs.end());
  canvas_index_ += 1;
  pins_ = dgemma::canvas_pins(params_.pins, canvas_index_, canvas_);
  if (eos || length) {
    // An answer that ends at its last pinned position (a filled template) is complete: stop.
    const bool complete = length && pins_end_ > 0 && pins_end_ == params_.max_tokens;
    finish(eos || complete ? FinishReason::kStop : FinishReason::kLength);
    c.finished = true;
  } else {
    // The whole argmax canvas (not the trimmed part) conditions the next one, as in the reference.
    history_.insert(history_.end(), committed.begin(), committed.end());
    if (!images_.empty()) keys_.insert(keys_.end(), committed.begin(), committed.end());
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
