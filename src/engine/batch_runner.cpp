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
  Backend& be = model_.backend();
  Sequence::DeviceState& d = seq.dev;
  d.canvas = be.alloc(ScalarType::kI32, {canvas_});
  d.prev_argmax = be.alloc(ScalarType::kI32, {canvas_});
  d.entropy = be.alloc(ScalarType::kF32, {canvas_});
  d.argmax = be.alloc(ScalarType::kI32, {canvas_});
  d.sample = be.alloc(ScalarType::kI32, {canvas_});
  d.logprob = be.alloc(ScalarType::kF32, {canvas_});
}

void BatchRunner::begin_canvas(Sequence& seq) {
  seq.step = 0;
  seq.have_soft = false;
  seq.stability = StabilityRun(seq.params.diffusion.stability_threshold);
  const std::vector<int32_t> canvas =
      seq.canvas_index == 0 && !seq.params.initial_canvas.empty()
          ? seq.params.initial_canvas
          : random_canvas(seq.params.seed, static_cast<uint64_t>(seq.canvas_index), 0, rng::kInitCanvas, canvas_, vocab_);
  DG_CHECK(static_cast<int>(canvas.size()) == canvas_);
  model_.backend().from_host(seq.dev.canvas, canvas.data());
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
      items.push_back({ForwardItem::Kind::kEncode, s->pending_commit, s->kv, {}, {}, {}});
      committing.push_back(s);
      budget -= static_cast<int64_t>(s->pending_commit.size());
    }
    items.push_back({ForwardItem::Kind::kDenoise, {}, s->kv, s->have_soft ? s->soft_embeds : Tensor{}, s->logits, s->dev.canvas});
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
    items.push_back({ForwardItem::Kind::kEncode, tokens, s->kv, {}, {}, {}});
    prefilling.push_back({s, chunk});
    budget -= chunk;
    // The prompt's last chunk is fused with the first denoising step when the budget allows.
    if (fuse_prefill_ && chunk == remaining && budget >= canvas_) {
      s->prefilled += chunk;
      s->state = Sequence::State::kDenoise;
      s->prefill_done_time = now_seconds();
      begin_canvas(*s);
      items.push_back({ForwardItem::Kind::kDenoise, {}, s->kv, Tensor{}, s->logits, s->dev.canvas});
      denoising.push_back(s);
      prefilling.back().second = 0;  // already accounted
      budget -= canvas_;
    }
  }
  if (items.empty()) return stats;

  for (const auto& it : items) {
    stats.tokens += it.length();
    (it.kind == ForwardItem::Kind::kDenoise ? stats.denoise_items : stats.encode_items)++;
  }
  // Traces record each step's input canvas (decide overwrites it after the forward).
  std::vector<std::vector<int32_t>> canvas_in(denoising.size());
  for (size_t i = 0; i < denoising.size(); ++i) {
    if (!denoising[i]->params.trace) continue;
    canvas_in[i].resize(static_cast<size_t>(canvas_));
    model_.backend().to_host(denoising[i]->dev.canvas, canvas_in[i].data());
  }

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
  // Every canvas's sampler, self-conditioning GEMM and decision are queued on the device, then one
  // read of all the flags.
  Tensor flags = model_.backend().alloc(ScalarType::kI32, {static_cast<int64_t>(std::max<size_t>(denoising.size(), 1)), 2});
  std::vector<QueuedStep> queued(denoising.size());
  for (size_t i = 0; i < denoising.size(); ++i) queued[i] = queue_sampling(*denoising[i], flags.rows(static_cast<int64_t>(i), static_cast<int64_t>(i) + 1));
  std::vector<int32_t> flag_values(static_cast<size_t>(flags.numel()));
  model_.backend().to_host(flags, flag_values.data());
  for (size_t i = 0; i < denoising.size(); ++i) {
    Sequence* s = denoising[i];
    if (s->params.trace) {
      if (s->step == 0) s->canvases.push_back({s->canvas_index, 0, 0, {}, {}});
      s->canvases.back().trace.push_back({});
      s->canvases.back().trace.back().canvas_in = std::move(canvas_in[i]);
    }
    after_denoise(*s, queued[i], flag_values[2 * i] != 0, flag_values[2 * i + 1] != 0, events);
  }
  stats.sampler_ms = sw.ms();
  return stats;
}

BatchRunner::QueuedStep BatchRunner::queue_sampling(Sequence& seq, const Tensor& flags) {
  Backend& be = model_.backend();
  const DiffusionParams& dp = seq.params.diffusion;
  const int C = canvas_;
  SamplerArgs sa;
  sa.logits = seq.logits;
  sa.softcap = static_cast<float>(model_.config().text.final_logit_softcapping);
  sa.temperature = temperature_at(dp, seq.step);
  sa.sample_key = rng::stream_key(seq.params.seed, static_cast<uint64_t>(seq.canvas_index), static_cast<uint64_t>(seq.step), rng::kSample);
  sa.want_probs = true;
  sa.entropy = seq.dev.entropy;
  sa.argmax = seq.dev.argmax;
  sa.sample = seq.dev.sample;
  sa.argmax_logprob = seq.dev.logprob;
  if (seq.params.trace) {
    sa.argmax_gap = be.alloc(ScalarType::kF32, {C});
    sa.sample_gap = be.alloc(ScalarType::kF32, {C});
  }
  be.sampler(sa);
  // Self-conditioning signal for the next step: probs . E * embed_scale.
  model_.soft_embeddings(seq.logits, seq.soft_embeds);
  seq.have_soft = true;

  QueuedStep q;
  q.temperature = sa.temperature;
  q.argmax_gap = sa.argmax_gap;
  q.sample_gap = sa.sample_gap;
  DecideArgs da;
  da.entropy = seq.dev.entropy;
  da.argmax = seq.dev.argmax;
  da.sample = seq.dev.sample;
  da.greedy = seq.params.greedy;  // temperature 0
  da.entropy_bound = static_cast<float>(dp.entropy_bound);
  da.confidence_threshold = static_cast<float>(dp.confidence_threshold);
  da.renoise_key = rng::stream_key(seq.params.seed, static_cast<uint64_t>(seq.canvas_index), static_cast<uint64_t>(seq.step), rng::kRenoise);
  da.vocab = vocab_;
  da.prev_argmax = seq.dev.prev_argmax;
  da.have_prev = seq.step > 0;
  da.canvas = seq.dev.canvas;
  da.flags = flags.reshape({2});
  if (seq.params.trace) da.accept = q.accept = be.alloc(ScalarType::kU8, {C});
  be.decide(da);
  return q;
}

void BatchRunner::after_denoise(Sequence& seq, const QueuedStep& q, bool same_argmax, bool confident,
                                std::vector<SequenceEvent>& events) {
  Backend& be = model_.backend();
  const DiffusionParams& dp = seq.params.diffusion;
  const int C = canvas_;
  const bool stable = seq.stability.update(same_argmax);
  const bool stop = stable && confident;
  const bool last = stop || seq.step + 1 >= dp.max_denoising_steps;
  seq.step += 1;
  seq.denoise_steps_total += 1;

  // The host needs the argmax canvas only for a commit, a preview or a trace.
  std::vector<int32_t> argmax;
  if (last || seq.params.previews || seq.params.trace) {
    argmax.resize(static_cast<size_t>(C));
    be.to_host(seq.dev.argmax, argmax.data());
  }
  if (seq.params.trace) {
    StepRecord& r = seq.canvases.back().trace.back();
    auto host_f32 = [&](const Tensor& t) {
      std::vector<float> v(static_cast<size_t>(C));
      be.to_host(t, v.data());
      return v;
    };
    r.argmax = argmax;
    r.sample.resize(static_cast<size_t>(C));
    be.to_host(seq.params.greedy ? seq.dev.argmax : seq.dev.sample, r.sample.data());
    r.canvas_out.resize(static_cast<size_t>(C));
    be.to_host(seq.dev.canvas, r.canvas_out.data());
    r.entropy = host_f32(seq.dev.entropy);
    r.accept.resize(static_cast<size_t>(C));
    be.to_host(q.accept, r.accept.data());
    r.temperature = q.temperature;
    r.stop = stop;
    r.argmax_gap = host_f32(q.argmax_gap);
    r.sample_gap = host_f32(q.sample_gap);
    r.accept_margin = entropy_bound_margins(r.entropy, static_cast<float>(dp.entropy_bound));
  }
  if (seq.params.previews) {
    SequenceEvent ev;
    ev.seq = &seq;
    ev.kind = SequenceEvent::Kind::kPreview;
    ev.tokens = argmax;
    ev.steps = seq.step;
    events.push_back(std::move(ev));
  }
  if (last) {
    // Commit the argmax canvas of the last executed step.
    std::vector<float> logprob;
    if (seq.params.logprobs) {
      logprob.resize(static_cast<size_t>(C));
      be.to_host(seq.dev.logprob, logprob.data());
    }
    commit(seq, events, seq.step, std::move(argmax), logprob);
  }
}

void BatchRunner::commit(Sequence& seq, std::vector<SequenceEvent>& events, int steps, std::vector<int32_t> committed,
                         const std::vector<float>& logprob) {
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
    seq.pending_commit = std::move(committed);
    seq.canvas_index += 1;
    begin_canvas(seq);
  }
  events.push_back(std::move(ev));
}

}  // namespace dgemma
