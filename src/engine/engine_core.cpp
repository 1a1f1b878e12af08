#include "engine/engine_core.h"

#include <algorithm>

#include "util/error.h"
#include "util/timing.h"

namespace dgemma {

EngineCore::EngineCore(SchedulerConfig scheduler, BlockManagerConfig blocks, std::unique_ptr<ModelRunner> runner)
    : blocks_(blocks), scheduler_(scheduler, blocks_), runner_(std::move(runner)) {
  DG_CHECK(runner_ && runner_->canvas_length() == scheduler.canvas_length);
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
  ev.seq = seq;
  ev.kind = CoreEvent::Kind::kError;
  ev.message = message;
  events.push_back(std::move(ev));
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

  std::vector<DenoiseFlags> flags;
  try {
    flags = runner_->run(plan);
  } catch (const std::exception& e) {
    // The step failed as a whole (a device error): each of its sequences fails, the rest go on.
    std::vector<Sequence*> seqs;
    for (const auto& it : plan.items)
      if (std::find(seqs.begin(), seqs.end(), it.seq) == seqs.end()) seqs.push_back(it.seq);
    for (Sequence* s : seqs) fail(s, std::string("engine error: ") + e.what(), events);
    return stats;
  }
  DG_CHECK(flags.size() == static_cast<size_t>(stats.denoise_items));
  scheduler_.on_step_done(plan, now_seconds());

  size_t k = 0;
  for (const auto& it : plan.items) {
    if (it.kind != PlannedItem::Kind::kDenoise) continue;
    Sequence& s = *it.seq;
    const DenoiseFlags f = flags[k++];
    if (std::string error = runner_->read_error(s); !error.empty()) {
      fail(&s, error, events);
      continue;
    }
    const bool last = s.on_step(f.same_argmax, f.confident);
    if (s.params().trace && trace_) trace_->on_step(s.id(), s.canvas_index(), runner_->read_trace(s, last));
    // The host needs the argmax canvas only for a commit or a preview.
    std::vector<int32_t> argmax;
    if (last || s.params().previews) {
      argmax = runner_->read_argmax(s);
      apply_pins(s.canvas_pins(), argmax);  // pinned positions show (and commit) their tokens
    }
    if (s.params().previews) {
      CoreEvent ev;
      ev.seq = &s;
      ev.kind = CoreEvent::Kind::kPreview;
      ev.tokens = argmax;
      ev.entropy = runner_->read_entropy(s);
      ev.accepted = runner_->read_accepted(s);
      ev.steps = s.step();
      events.push_back(std::move(ev));
    }
    if (!last) continue;
    const int canvas_index = s.canvas_index();
    std::vector<float> logprobs;
    if (s.params().logprobs) logprobs = runner_->read_logprobs(s);
    TopAlternatives top;
    if (s.params().top_logprobs > 0) top = runner_->read_top_logprobs(s);
    CanvasCommit c = s.commit(argmax, logprobs, now_seconds(), top);
    if (trace_) trace_->on_commit(s.id(), canvas_index, c.steps, c.denoise_ms, argmax);
    CoreEvent ev;
    ev.seq = &s;
    ev.kind = CoreEvent::Kind::kCanvas;
    ev.tokens = std::move(c.tokens);
    ev.logprobs = std::move(c.logprobs);
    ev.top = std::move(c.top);
    ev.pinned = std::move(c.pinned);
    ev.steps = c.steps;
    ev.denoise_ms = c.denoise_ms;
    ev.finished = c.finished;
    if (c.finished) {
      scheduler_.remove(&s);
      runner_->release(s);
    }
    events.push_back(std::move(ev));
  }
  return stats;
}

}  // namespace dgemma
