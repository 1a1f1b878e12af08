#include "engine/scheduler.h"

#include <algorithm>

#include "util/error.h"

namespace dgemma {

Scheduler::Scheduler(SchedulerConfig config, BlockManager& blocks) : config_(config), blocks_(blocks) {
  DG_CHECK(config_.max_num_seqs > 0 && config_.prefill_chunk > 0 && config_.canvas_length > 0);
  DG_CHECK(config_.max_num_batched_tokens >= config_.canvas_length);
}

int64_t Scheduler::max_pages_needed(int64_t prompt_len, int64_t max_tokens) const {
  const int64_t C = config_.canvas_length;
  const int64_t canvases = (std::max<int64_t>(max_tokens, 1) + C - 1) / C;
  const int64_t tokens = prompt_len + (canvases - 1) * C;
  return (tokens + blocks_.page_size() - 1) / blocks_.page_size();
}

bool Scheduler::can_ever_fit(int64_t prompt_len, int64_t max_tokens) const {
  if (!blocks_.has_group(KvGroup::kFull)) return true;
  return max_pages_needed(prompt_len, max_tokens) <= blocks_.total_pages(KvGroup::kFull);
}

void Scheduler::add(Sequence* seq) {
  seq->state = Sequence::State::kWaiting;
  waiting_.push_back(seq);
}

void Scheduler::remove(Sequence* seq) {
  blocks_.free(seq->blocks);
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
}

double Scheduler::kv_usage() const {
  const KvGroup g = blocks_.has_group(KvGroup::kFull) ? KvGroup::kFull : KvGroup::kSliding;
  const int64_t total = blocks_.total_pages(g);
  return total > 0 ? static_cast<double>(blocks_.used_pages(g)) / static_cast<double>(total) : 0.0;
}

void Scheduler::preempt(Sequence* victim, StepPlan& plan) {
  blocks_.free(victim->blocks);
  victim->preempt();
  running_.erase(std::remove(running_.begin(), running_.end(), victim), running_.end());
  waiting_.push_front(victim);
  plan.preempted.push_back(victim);
  // Items already planned for the victim in this step are dropped.
  plan.items.erase(std::remove_if(plan.items.begin(), plan.items.end(),
                                  [&](const PlannedItem& it) { return it.seq == victim; }),
                   plan.items.end());
  ++stats_.preemptions;
}

bool Scheduler::reserve(Sequence* seq, int64_t end, StepPlan& plan) {
  while (!blocks_.extend(seq->blocks, seq->encoded, end)) {
    // The most recently admitted other sequence gives its pages back.
    Sequence* victim = nullptr;
    for (auto it = running_.rbegin(); it != running_.rend(); ++it)
      if (*it != seq) {
        victim = *it;
        break;
      }
    if (victim == nullptr) return false;
    // Never preempt a sequence admitted before this one for a prefill chunk: it waits instead.
    if (seq->state == Sequence::State::kPrefill &&
        std::find(running_.begin(), running_.end(), victim) < std::find(running_.begin(), running_.end(), seq))
      return false;
    preempt(victim, plan);
  }
  return true;
}

void Scheduler::admit(StepPlan& plan, double now) {
  while (!waiting_.empty() && static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Sequence* s = waiting_.front();
    DG_CHECK(s->encoded == 0 && s->blocks.tables[0].empty() && s->blocks.tables[1].empty());
    // Keep at least one token to encode: the prefix cache serves whole pages before the last token.
    // A cached prefix never ends inside an image block (its tokens are encoded together).
    int64_t cap = static_cast<int64_t>(s->history().size()) - 1;
    int64_t cached = blocks_.share_prefix(s->blocks, s->cache_keys(), cap);
    while (cached > 0 && s->inside_image(cached)) {
      blocks_.free(s->blocks);
      cap = s->chunk_end(0, cached);
      cap = cap < cached ? cap : 0;
      cached = cap > 0 ? blocks_.share_prefix(s->blocks, s->cache_keys(), cap) : 0;
    }
    s->encoded = cached;
    const int64_t end = std::min<int64_t>(static_cast<int64_t>(s->history().size()), cached + config_.prefill_chunk);
    const int64_t need_full = blocks_.pages_needed(s->blocks, cached, static_cast<int64_t>(s->history().size()), KvGroup::kFull);
    const bool fits = need_full <= blocks_.free_pages(KvGroup::kFull) &&
                      blocks_.pages_needed(s->blocks, cached, end, KvGroup::kSliding) <= blocks_.free_pages(KvGroup::kSliding);
    if (!fits) {
      blocks_.free(s->blocks);
      s->encoded = 0;
      break;  // FIFO: nobody overtakes the head of the queue
    }
    waiting_.pop_front();
    if (!s->admitted_once) {
      s->admitted_once = true;
      s->cached_tokens = std::min(cached, s->prompt_len());
      s->admit_time = now;
      stats_.prefix_queries += s->prompt_len();
      stats_.prefix_hits += s->cached_tokens;
    }
    s->state = Sequence::State::kPrefill;
    running_.push_back(s);
    plan.admitted.push_back(s);
  }
}

StepPlan Scheduler::schedule(double now) {
  StepPlan plan;
  admit(plan, now);
  const int64_t C = config_.canvas_length;
  int64_t budget = config_.max_num_batched_tokens;

  // Denoising work first (each costs a canvas, plus its committed canvas's encode).
  const std::vector<Sequence*> order = running_;
  for (Sequence* s : order) {
    if (s->state != Sequence::State::kDenoise) continue;
    if (std::find(running_.begin(), running_.end(), s) == running_.end()) continue;  // preempted meanwhile
    const int64_t hist = static_cast<int64_t>(s->history().size());
    if (s->pending() > 0) {
      if (!reserve(s, hist, plan)) continue;
      plan.items.push_back({s, PlannedItem::Kind::kEncode, s->encoded, hist});
      budget -= s->pending();
    }
    plan.items.push_back({s, PlannedItem::Kind::kDenoise, 0, 0});
    budget -= C;
  }
  // Prefill chunks with what is left of the budget.
  bool any_prefill = false;
  for (Sequence* s : std::vector<Sequence*>(running_)) {
    if (s->state != Sequence::State::kPrefill) continue;
    if (std::find(running_.begin(), running_.end(), s) == running_.end()) continue;
    const int64_t remaining = s->pending();
    // Within the budget; when the denoising work took all of it, still one chunk a step.
    const int64_t allowed = budget > 0 ? budget : (any_prefill ? 0 : config_.prefill_chunk);
    int64_t chunk = std::min({remaining, config_.prefill_chunk, allowed});
    if (chunk <= 0) continue;
    // A chunk never cuts an image block: it stops before one, or takes one that starts it whole (then
    // only as the step's first prefill chunk, as a chunk beyond the budget is; submit checked that a
    // block fits a chunk).
    const int64_t end = s->chunk_end(s->encoded, s->encoded + chunk);
    if (end > s->encoded + chunk && (any_prefill || end - s->encoded > config_.prefill_chunk)) continue;
    chunk = end - s->encoded;
    if (!reserve(s, s->encoded + chunk, plan)) continue;
    plan.items.push_back({s, PlannedItem::Kind::kEncode, s->encoded, s->encoded + chunk});
    any_prefill = true;
    budget -= chunk;
    if (config_.fuse_prefill_tail && chunk == remaining && budget >= C) {
      // The prompt's last chunk shares its pass with the first denoising step.
      // Its prefill is done when this step is (on_step_done), not now.
      s->state = Sequence::State::kDenoise;
      s->begin_canvas(now);
      plan.items.push_back({s, PlannedItem::Kind::kDenoise, 0, 0});
      budget -= C;
    }
  }
  for (const auto& it : plan.items) plan.tokens += it.kind == PlannedItem::Kind::kEncode ? it.end - it.begin : C;
  return plan;
}

void Scheduler::on_step_done(const StepPlan& plan, double now) {
  for (const auto& it : plan.items) {
    if (it.kind != PlannedItem::Kind::kEncode) continue;
    Sequence* s = it.seq;
    DG_CHECK(it.begin == s->encoded);
    s->encoded = it.end;
    blocks_.on_encoded(s->blocks, s->cache_keys(), s->encoded);
    // The step that encoded the prompt's last token (alone or fused with the first denoising step)
    // has run: the request's prefill time ends here. A prefill again after a preemption keeps the first.
    if (s->prefill_done_time == 0 && s->encoded >= s->prompt_len()) s->prefill_done_time = now;
    if (s->state == Sequence::State::kPrefill && s->pending() == 0) {
      s->state = Sequence::State::kDenoise;
      s->begin_canvas(now);
    }
  }
}

}  // namespace dgemma
