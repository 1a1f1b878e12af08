#include "engine/engine_core.h"

#include <algorithm>

#include "util/error.h"
#include "util/fatal_error.h"
#include "util/timing.h"

namespace dgemma {

std::unique_ptr<EngineCore> EngineCore::create(const ModelConfig& mc, const EngineSizing& sizing,
                                               std::unique_ptr<ModelRunner> runner) {
  const KvGeometry geo = kv_geometry(mc);
  SchedulerConfig sc;
  sc.max_num_seqs = sizing.max_num_seqs;
  sc.max_num_batched_tokens = sizing.max_num_batched_tokens;
  sc.prefill_chunk = sizing.prefill_chunk;
  sc.canvas_length = mc.canvas_length;
  sc.fuse_prefill_tail = sizing.fuse_prefill_tail;
  BlockManagerConfig bc;
  bc.page_size = geo.page_size;
  bc.num_pages = sizing.kv.pages;
  bc.sliding_keep = geo.sliding_keep;
  bc.prefix_caching = sizing.prefix_caching;
  return std::make_unique<EngineCore>(sc, bc, std::move(runner), sizing.max_model_len);
}

EngineCore::EngineCore(SchedulerConfig scheduler, BlockManagerConfig blocks,
                       std::unique_ptr<ModelRunner> runner, int64_t max_model_len)
    : blocks_(blocks),
      scheduler_(scheduler, blocks_),
      runner_(std::move(runner)),
      max_model_len_(max_model_len) {
  DG_CHECK(runner_ && runner_->canvas_length() == scheduler.canvas_length);
}

void EngineCore::prepare(const std::function<SequenceParams(uint64_t id)>& params_for) {
  warm_up_params_ = params_for;
  runner_->prepare(*this);
  warm_up_params_ = nullptr;
  blocks_.drop_unreferenced_cache();
  scheduler_.reset_stats();
}

std::string EngineCore::run_to_end(const std::vector<std::vector<int32_t>>& prompts, int steps) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (const std::vector<int32_t>& prompt : prompts) {
    const uint64_t id = warm_up_id_++;
    SequenceParams p = warm_up_params_ ? warm_up_params_(id) : SequenceParams{};
    p.max_tokens = canvas_length();
    p.ignore_eos = true;
    p.diffusion.max_denoising_steps = steps;
    seqs.push_back(std::make_unique<Sequence>(id, prompt, std::move(p), canvas_length(), vocab_size()));
    add(seqs.back().get());
  }
  std::vector<CoreEvent> events;
  constexpr int kMaxSteps = 100000;  // far more than prompts of a step budget and two denoising steps take
  for (int i = 0; i < kMaxSteps && has_work(); ++i) step(events);
  std::string error = has_work() ? "the sequences did not finish" : "";
  for (const auto& s : seqs)
    if (s->state != Sequence::State::kFinished) abort(s.get());  // none outlives its place in the core
  for (const CoreEvent& ev : events)
    if (error.empty() && ev.event.kind == RequestEvent::Kind::kError) error = ev.event.message;
  return error;
}

void EngineCore::add(Sequence* seq) { scheduler_.add(seq); }

void EngineCore::abort(Sequence* seq) {
  scheduler_.remove(seq);
  runner_->release(*seq);
  seq->finish(FinishReason::kAbort);
}

void EngineCore::fail(Sequence* seq, const std::string& message, std::vector<CoreEvent>& events) {
  scheduler_.remove(seq);
  runner_->release(*seq);
  seq->finish(FinishReason::kError);
  CoreEvent ev;
  ev.seq_id = seq->id();
  ev.event.kind = RequestEvent::Kind::kError;
  ev.event.message = message;
  ev.finished = true;
  events.push_back(std::move(ev));
}

CoreCounts EngineCore::counts() const {
  CoreCounts c;
  c.running = static_cast<int64_t>(scheduler_.running().size());
  c.waiting = static_cast<int64_t>(scheduler_.waiting().size());
  c.kv_usage = scheduler_.kv_usage();
  c.scheduler = scheduler_.stats();
  return c;
}

StepStats EngineCore::step(std::vector<CoreEvent>& events) {
  StepStats stats;
  StepPlan plan = scheduler_.schedule(now_seconds());
  for (Sequence* s : plan.preempted) runner_->release(*s);
  stats.preempted = static_cast<int>(plan.preempted.size());
  if (plan_hook_) plan_hook_(plan);
  if (plan.empty()) return stats;
  stats.tokens = plan.tokens;
  for (const auto& it : plan.items) (it.kind == PlannedItem::Kind::kDenoise ? stats.denoise_items : stats.encode_items)++;

  StepResult result;
  try {
    result = runner_->run(plan);
  } catch (const FatalError&) {
    throw;  // the engine cannot go on (DiffusionEngine stops)
  } catch (const std::exception& e) {
    // The step failed as a whole (a device error): each of its sequences fails, the rest go on.
    std::vector<Sequence*> seqs;
    for (const auto& it : plan.items)
      if (std::find(seqs.begin(), seqs.end(), it.seq) == seqs.end()) seqs.push_back(it.seq);
    for (Sequence* s : seqs) fail(s, std::string("engine error: ") + e.what(), events);
    return stats;
  }
  DG_CHECK(result.canvases.size() == static_cast<size_t>(stats.denoise_items));
  stats.replayed = result.replayed;
  scheduler_.on_step_done(plan, now_seconds());

  size_t k = 0;
  for (const auto& it : plan.items)
    if (it.kind == PlannedItem::Kind::kDenoise) on_canvas(*it.seq, std::move(result.canvases[k++]), events);
  return stats;
}

void EngineCore::on_canvas(Sequence& s, CanvasResult r, std::vector<CoreEvent>& events) {
  if (!r.error.empty()) return fail(&s, r.error, events);
  const bool last = s.on_step(r.flags.same_argmax, r.flags.confident);
  if (r.trace && trace_) {
    r.trace->stop = last;
    trace_->on_step(s.id(), s.canvas_index(), std::move(*r.trace));
  }
  CoreEvent preview;
  if (s.params().previews) {
    preview.seq_id = s.id();
    preview.event.kind = RequestEvent::Kind::kPreview;
    preview.event.entropy = std::move(r.entropy);
    preview.event.accepted = std::move(r.accepted);
    preview.event.steps = s.step();
  }
  if (!last) {
    if (s.params().previews) {
      preview.event.tokens = s.shown_canvas(std::move(r.argmax));  // pinned positions show their tokens
      events.push_back(std::move(preview));
    }
    return;
  }
  const int canvas_index = s.canvas_index();
  CanvasCommit c = s.commit(r.argmax, r.logprobs, now_seconds(), r.top);
  if (s.params().previews) {
    preview.event.tokens = c.canvas;
    events.push_back(std::move(preview));
  }
  if (trace_) trace_->on_commit(s.id(), canvas_index, c.steps, c.denoise_ms, c.canvas);
  CoreEvent ev;
  ev.seq_id = s.id();
  RequestEvent& out = ev.event;
  out.kind = RequestEvent::Kind::kCanvas;
  out.tokens = std::move(c.tokens);
  out.logprobs = std::move(c.logprobs);
  out.top_n = c.top.n;
  out.top_ids = std::move(c.top.ids);
  out.top_logprobs = std::move(c.top.logprobs);
  out.pinned = std::move(c.pinned);
  out.steps = c.steps;
  out.denoise_ms = c.denoise_ms;
  ev.finished = c.finished;
  if (c.finished) {
    scheduler_.remove(&s);
    runner_->release(s);
  }
  events.push_back(std::move(ev));
}

}  // namespace dgemma
