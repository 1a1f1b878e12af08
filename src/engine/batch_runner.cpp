#include "engine/batch_runner.h"

#include <algorithm>

#include "util/counter_rng.h"
#include "util/error.h"
#include "util/timing.h"

namespace dgemma {

BatchRunner::BatchRunner(DiffusionGemma& model, int64_t max_num_batched_tokens, int64_t prefill_chunk)
    : model_(model),
      max_tokens_per_step_(max_num_batched_tokens),
      prefill_chunk_(prefill_chunk),
      canvas_(model.config().canvas_length),
      vocab_(static_cast<int>(model.config().text.vocab_size)) {
  DG_CHECK(prefill_chunk_ > 0 && max_tokens_per_step_ >= canvas_);
}

void BatchRunner::start(Sequence& seq) {
  DG_CHECK(seq.kv != nullptr && !seq.logits.empty() && !seq.soft_embeds.empty() && !seq.prompt.empty());
  for (auto& l : seq.kv->layers) l.length = 0;
  seq.kv->encoded = 0;
  seq.state = Sequence::State::kPrefill;
  seq.prefilled = 0;
  seq.canvas_index = 0;
}

void BatchRunner::begin_canvas(Sequence& seq) {
  seq.step = 0;
  seq.have_soft = false;
  seq.stability = StabilityTracker(seq.params.diffusion.stability_threshold);
  if (seq.canvas_index == 0 && !seq.params.initial_canvas.empty()) {
    seq.canvas = seq.params.initial_canvas;
  } else {
    seq.canvas = random_canvas(seq.params.seed, static_cast<uint64_t>(seq.canvas_index), 0, rng::kInitCanvas, canvas_, vocab_);
  }
  seq.canvas_start = now_seconds();
}

StepStats BatchRunner::step(std::span<Sequence* const> seqs, std::vector<SequenceEvent>& events) {
  StepStats stats;
  std::vector<ForwardItem> items;
  std::vector<Sequence*> denoising;
  std::vector<std::pair<Sequence*, int64_t>> prefilling;  // chunk sizes
  std::vector<Sequence*> committing;
  items.reserve(seqs.size() * 2);

  // Denoising work first (each costs a canvas), then prefill chunks with what is left of the budget.
  int64_t budget = max_tokens_per_step_;
  for (Sequence* s : seqs) {
    if (s->state != Sequence::State::kDenoise) continue;
    if (!s->pending_commit.empty()) {
      items.push_back({ForwardItem::Kind::kEncode, s->pending_commit, s->kv, {}, {}});
      committing.push_back(s);
      budget -= static_cast<int64_t>(s->pending_commit.size());
    }
    items.push_back({ForwardItem::Kind::kDenoise, s->canvas, s->kv, s->have_soft ? s->soft_embeds : Tensor{}, s->logits});
    denoising.push_back(s);
    budget -= canvas_;
  }
  for (Sequence* s : seqs) {
    if (s->state != Sequence::State::kPrefill) continue;
    const int64_t remaining = static_cast<int64_t>(s->prompt.size()) - s->prefilled;
    // Always make progress: at least one chunk per step even when denoising used the budget.
    int64_t chunk = std::min({remaining, prefill_chunk_, std::max<int64_t>(budget, prefilling.empty() ? prefill_chunk_ : 0)});
    if (chunk <= 0) continue;
    std::span<const int32_t> tokens(s->prompt.data() + s->prefilled, static_cast<size_t>(chunk));
    items.push_back({ForwardItem::Kind::kEncode, tokens, s->kv, {}, {}});
    prefilling.push_back({s, chunk});
    budget -= chunk;
    // The prompt's last chunk is fused with the first denoising step when the budget allows.
    if (fuse_prefill_ && chunk == remaining && budget >= canvas_) {
      s->prefilled += chunk;
      s->state = Sequence::State::kDenoise;
      s->prefill_done_time = now_seconds();
      begin_canvas(*s);
      items.push_back({ForwardItem::Kind::kDenoise, s->canvas, s->kv, Tensor{}, s->logits});
      denoising.push_back(s);
      prefilling.back().second = 0;  // already accounted
      budget -= canvas_;
    }
  }
  if (items.empty()) return stats;

  for (const auto& it : items) {
    stats.tokens += static_cast<int64_t>(it.tokens.size());
    (it.kind == ForwardItem::Kind::kDenoise ? stats.denoise_items : stats.encode_items)++;
  }
  // Per-step canvases for traces must be captured before the forward (the canvas vector changes after).
  std::vector<std::vector<int32_t>> canvas_in;
  for (Sequence* s : denoising) canvas_in.push_back(s->params.trace ? s->canvas : std::vector<int32_t>{});

  Stopwatch fw;
  model_.forward(items);
  model_.backend().synchronize();
  stats.forward_ms = fw.ms();

  for (Sequence* s : committing) s->pending_commit.clear();
  for (auto& [s, chunk] : prefilling) {
    if (chunk == 0) continue;
    s->prefilled += chunk;
    if (s->prefilled == static_cast<int64_t>(s->prompt.size())) {
      s->state = Sequence::State::kDenoise;
      s->prefill_done_time = now_seconds();
      begin_canvas(*s);
    }
  }
  Stopwatch sw;
  for (size_t i = 0; i < denoising.size(); ++i) {
    Sequence* s = denoising[i];
    if (s->params.trace) {
      if (s->step == 0) s->canvases.push_back({s->canvas_index, 0, 0, {}, {}});
      s->canvases.back().trace.push_back({});
      s->canvases.back().trace.back().canvas_in = std::move(canvas_in[i]);
    }
    after_denoise(*s, events);
  }
  stats.sampler_ms = sw.ms();
  return stats;
}

void BatchRunner::after_denoise(Sequence& seq, std::vector<SequenceEvent>& events) {
  Backend& be = model_.backend();
  const DiffusionParams& dp = seq.params.diffusion;
  const int C = canvas_;
  const float temperature = temperature_at(dp, seq.step);

  SamplerArgs sa;
  sa.logits = seq.logits;
  sa.softcap = static_cast<float>(model_.config().text.final_logit_softcapping);
  sa.temperature = temperature;
  sa.sample_key = rng::stream_key(seq.params.seed, static_cast<uint64_t>(seq.canvas_index), static_cast<uint64_t>(seq.step), rng::kSample);
  sa.want_probs = true;
  sa.entropy = be.alloc(ScalarType::kF32, {C});
  sa.argmax = be.alloc(ScalarType::kI32, {C});
  sa.sample = be.alloc(ScalarType::kI32, {C});
  sa.argmax_logprob = be.alloc(ScalarType::kF32, {C});
  if (seq.params.trace) {
    sa.argmax_gap = be.alloc(ScalarType::kF32, {C});
    sa.sample_gap = be.alloc(ScalarType::kF32, {C});
  }
  be.sampler(sa);
  // Self-conditioning signal for the next step: probs . E * embed_scale.
  model_.soft_embeddings(seq.logits, seq.soft_embeds);
  seq.have_soft = true;

  std::vector<float> entropy(C), logprob(C);
  std::vector<int32_t> argmax(C), sample(C);
  be.to_host(sa.entropy, entropy.data());
  be.to_host(sa.argmax, argmax.data());
  be.to_host(sa.sample, sample.data());
  be.to_host(sa.argmax_logprob, logprob.data());

  if (seq.params.greedy) sample = argmax;  // temperature 0
  const std::vector<uint8_t> accept = entropy_bound_accept(entropy, dp.entropy_bound);
  const std::vector<int32_t> noise =
      random_canvas(seq.params.seed, static_cast<uint64_t>(seq.canvas_index), static_cast<uint64_t>(seq.step), rng::kRenoise, C, vocab_);
  for (int p = 0; p < C; ++p) seq.canvas[p] = accept[p] ? sample[p] : noise[p];
  const bool stable = seq.stability.update(argmax);
  const bool confident = is_confident(entropy, dp.confidence_threshold);
  const bool stop = stable && confident;
  seq.step += 1;
  seq.denoise_steps_total += 1;

  if (seq.params.trace) {
    StepRecord& r = seq.canvases.back().trace.back();
    r.argmax = argmax;
    r.sample = sample;
    r.canvas_out = seq.canvas;
    r.entropy = entropy;
    r.accept = accept;
    r.temperature = temperature;
    r.stop = stop;
    r.argmax_gap.resize(C);
    r.sample_gap.resize(C);
    be.to_host(sa.argmax_gap, r.argmax_gap.data());
    be.to_host(sa.sample_gap, r.sample_gap.data());
    r.accept_margin = entropy_bound_margins(entropy, dp.entropy_bound);
  }
  if (seq.params.previews) {
    SequenceEvent ev;
    ev.seq = &seq;
    ev.kind = SequenceEvent::Kind::kPreview;
    ev.tokens = argmax;
    ev.steps = seq.step;
    events.push_back(std::move(ev));
  }
  if (stop || seq.step >= dp.max_denoising_steps) {
    // Commit the argmax canvas of the last executed step.
    const int steps = seq.step;
    seq.canvas = std::move(argmax);
    commit(seq, events, steps, logprob);
  }
}

void BatchRunner::commit(Sequence& seq, std::vector<SequenceEvent>& events, int steps, const std::vector<float>& logprob) {
  const std::vector<int32_t>& committed = seq.canvas;
  const int C = canvas_;
  // Returned tokens stop before the first EOS id (the reference keeps it and pads after; clients get
  // text up to it and finish_reason "stop"), and never exceed max_tokens.
  int n = C;
  bool eos = false;
  auto is_in = [](const std::vector<int32_t>& ids, int32_t t) { return std::find(ids.begin(), ids.end(), t) != ids.end(); };
  for (int p = 0; p < C && !eos; ++p) {
    const bool stop_id = is_in(seq.params.stop_ids, committed[p]);
    if (stop_id || (!seq.params.ignore_eos && is_in(seq.params.eos_ids, committed[p]))) {
      n = p;
      eos = true;
      if (stop_id) seq.stop_token_id = committed[p];
    }
  }
  const int64_t room = seq.params.max_tokens - static_cast<int64_t>(seq.output.size());
  bool length = false;
  if (n > room || (!eos && n == room)) {
    length = !eos || n > room;
    if (n > room) eos = false;
    n = static_cast<int>(std::max<int64_t>(0, room));
  }
  SequenceEvent ev;
  ev.seq = &seq;
  ev.kind = SequenceEvent::Kind::kCanvas;
  ev.tokens.assign(committed.begin(), committed.begin() + n);
  if (seq.params.logprobs) ev.logprobs.assign(logprob.begin(), logprob.begin() + n);
  ev.steps = steps;
  ev.denoise_ms = (now_seconds() - seq.canvas_start) * 1e3;
  seq.output.insert(seq.output.end(), ev.tokens.begin(), ev.tokens.end());
  if (seq.params.logprobs) seq.output_logprobs.insert(seq.output_logprobs.end(), ev.logprobs.begin(), ev.logprobs.end());
  if (!seq.params.trace) seq.canvases.push_back({seq.canvas_index, 0, 0, {}, {}});
  CanvasRecord& rec = seq.canvases.back();
  rec.steps = steps;
  rec.denoise_ms = ev.denoise_ms;
  rec.committed = committed;
  if (eos || length) {
    seq.state = Sequence::State::kFinished;
    seq.finish = eos ? FinishReason::kStop : FinishReason::kLength;
    ev.finished = true;
  } else {
    seq.pending_commit = committed;
    seq.canvas_index += 1;
    begin_canvas(seq);
  }
  events.push_back(std::move(ev));
}

}  // namespace dgemma
