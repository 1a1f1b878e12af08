#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "engine/limits.h"
#include "engine/params.h"
#include "engine/prompt_images.h"
#include "util/error.h"
#include "util/fatal_error.h"
#include "util/log.h"
#include "util/timing.h"

namespace dgemma {

DiffusionEngine::DiffusionEngine(const EngineConfig& config, std::unique_ptr<EngineCore> core,
                                 GenerationConfig generation)
    : max_queue_(config.max_queue),
      seed_(config.seed),
      core_(std::move(core)),
      generation_(std::move(generation)) {
  DG_CHECK(core_ != nullptr);
  counts_ = core_->counts();
  thread_ = std::thread([this] { loop(); });
}

DiffusionEngine::~DiffusionEngine() {
  stop_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SequenceParams DiffusionEngine::resolve(const SamplingParams& p, uint64_t request_id) const {
  return resolve_sequence_params(p, generation_, {seed_, request_id, core_->canvas_length(), vocab_size()});
}

std::shared_ptr<RequestStream> DiffusionEngine::submit(GenerationRequest request) {
  const int64_t plen = static_cast<int64_t>(request.prompt.size());
  const int64_t max_len = max_model_len();
  const int64_t max_tokens = request.params.max_tokens;
  if (plen == 0) throw Error(ErrorKind::kInvalidArgument, "the prompt is empty", "prompt");
  for (int32_t id : request.prompt)
    if (id < 0 || id >= vocab_size())
      throw Error(ErrorKind::kInvalidArgument, fmt::format("Prompt contains an invalid token id {}", id), "prompt");
  if (max_tokens < 1) throw Error(ErrorKind::kInvalidArgument, "max_tokens must be at least 1", "max_tokens");
  if (plen >= max_len || plen + max_tokens > max_len)
    throw Error(ErrorKind::kInvalidArgument, limits::context_length_message(max_len, plen, max_tokens),
                "max_tokens");
  const Scheduler& scheduler = core_->scheduler();
  if (!scheduler.can_ever_fit(plen, max_tokens))
    throw Error(
        ErrorKind::kInvalidArgument,
        fmt::format(
            "this request needs {} KV-cache pages of {} tokens ({} prompt tokens, up to {} completion "
            "tokens) but the whole cache holds {}; raise --gpu-memory-utilization or --kv-cache-memory, "
            "or shorten the request",
            scheduler.max_pages_needed(plen, max_tokens), core_->canvas_length(), plen, max_tokens,
            core_->blocks().total_pages(KvGroup::kFull)),
        "max_tokens");
  if (std::string why = failure(); !why.empty())
    throw Error(ErrorKind::kResourceExhausted, "the engine has stopped: " + why);
  std::vector<int64_t> soft = check_prompt_images(request, images_);
  const uint64_t id = next_id_++;
  SequenceParams sp = resolve(request.params, id);
  auto stream = std::make_shared<RequestStream>(id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Requests the next step admits to a free running place are not queued (admission happens
    // when a step is planned, and the engine may be inside a long step when they arrive).
    const int64_t free_places = std::max<int64_t>(0, scheduler.config().max_num_seqs - counts_.running);
    const int64_t waiting = static_cast<int64_t>(incoming_.size()) + counts_.waiting - free_places;
    if (!failure_.empty()) throw Error(ErrorKind::kResourceExhausted, "the engine has stopped: " + failure_);
    if (waiting >= max_queue_)
      throw Error(ErrorKind::kResourceExhausted,
                  fmt::format("the server is busy: {} requests are already waiting (--max-queue)", waiting));
    auto seq = std::make_unique<Sequence>(id, std::move(request.prompt), std::move(sp),
                                          core_->canvas_length(), vocab_size());
    seq->set_images(std::move(request.images), std::move(soft));
    seq->submit_time = now_seconds();
    incoming_.push_back({std::move(seq), stream});
  }
  cv_.notify_all();
  return stream;
}

EngineStats DiffusionEngine::stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.running = counts_.running;
    s.waiting = counts_.waiting + static_cast<int64_t>(incoming_.size());
    s.kv_usage = counts_.kv_usage;
    s.num_preemptions = counts_.scheduler.preemptions;
    s.prefix_cache_queries = counts_.scheduler.prefix_queries;
    s.prefix_cache_hits = counts_.scheduler.prefix_hits;
  }
  s.max_num_seqs = core_->scheduler().config().max_num_seqs;
  s.max_queue = max_queue_;
  s.requests_cancelled = cancelled_.load();
  s.engine_steps = steps_.load();
  s.canvas_length = core_->canvas_length();
  return s;
}

void DiffusionEngine::publish() {
  const CoreCounts c = core_->counts();
  std::lock_guard<std::mutex> lock(mu_);
  counts_ = c;
}

void DiffusionEngine::finish(Entry& e, FinishReason reason, const std::string& error) {
  const Sequence& q = *e.seq;
  RequestEvent ev;
  ev.kind = error.empty() ? RequestEvent::Kind::kFinished : RequestEvent::Kind::kError;
  ev.reason = reason;
  ev.message = error;
  ev.prompt_tokens = q.prompt_len();
  ev.completion_tokens = static_cast<int64_t>(q.output().size());
  ev.steps = static_cast<int>(q.denoise_steps_total());
  ev.stop_token_id = q.stop_token_id();
  ev.cached_tokens = q.cached_tokens;
  const double now = now_seconds();
  const double admit = q.admit_time > 0 ? q.admit_time : now;
  ev.queue_ms = (admit - q.submit_time) * 1e3;
  ev.prefill_ms = q.prefill_done_time > 0 ? (q.prefill_done_time - admit) * 1e3 : (now - admit) * 1e3;
  ev.decode_ms = q.prefill_done_time > 0 ? (now - q.prefill_done_time) * 1e3 : 0;
  if (reason == FinishReason::kAbort) ++cancelled_;
  e.stream->push(std::move(ev));
  e.stream.reset();  // marks the entry done
}

std::string DiffusionEngine::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void DiffusionEngine::stop_for_good(const std::string& why) {
  DG_LOG_ERROR("engine", "the engine stopped: {}", why);
  {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = why;  // before any request sees the error, so /health already reports it; submit() refuses
  }
  const std::string message = "engine error: " + why;
  for (auto& [id, e] : active_) {
    if (!e.stream) continue;
    try {
      core_->abort(e.seq.get());
    } catch (const std::exception&) {  // the device may be gone with the rank: the request ends anyway
    }
    finish(e, FinishReason::kError, message);
  }
  active_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : incoming_) {
    RequestEvent ev;
    ev.kind = RequestEvent::Kind::kError;
    ev.reason = FinishReason::kError;
    ev.message = message;
    e.stream->push(std::move(ev));
  }
  incoming_.clear();
  counts_ = CoreCounts{};
}

void DiffusionEngine::loop() {
  std::vector<CoreEvent> events;
  // Admissions and preemptions show before the step runs (--max-queue counts the waiting ones).
  core_->set_plan_hook([&](const StepPlan&) { publish(); });
  auto drop_done = [&] { std::erase_if(active_, [](const auto& kv) { return !kv.second.stream; }); };
  while (!stop_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!incoming_.empty()) {
        Entry& e = active_[incoming_.front().seq->id()] = std::move(incoming_.front());
        incoming_.pop_front();
        core_->add(e.seq.get());
      }
      // Under the lock, so submit() never misses them between the two counts.
      counts_ = core_->counts();
    }
    // Cancelled requests (client gone) leave at once, queued or running.
    for (auto& [id, e] : active_)
      if (e.stream && e.stream->cancelled()) {
        core_->abort(e.seq.get());
        finish(e, FinishReason::kAbort);
      }
    drop_done();
    publish();
    if (!core_->has_work()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop_ || !incoming_.empty(); });
      continue;
    }
    events.clear();
    try {
      core_->step(events);
      ++steps_;
    } catch (const FatalError& e) {
      stop_for_good(e.what());
      break;
    } catch (const std::exception& e) {
      DG_LOG_ERROR("engine", "step failed: {}", e.what());
      for (auto& [id, en] : active_) {
        core_->abort(en.seq.get());
        finish(en, FinishReason::kError, std::string("engine error: ") + e.what());
      }
      active_.clear();
      publish();
      continue;
    }
    for (CoreEvent& ev : events) {
      auto it = active_.find(ev.seq_id);
      if (it == active_.end() || !it->second.stream) continue;
      Entry& e = it->second;
      if (ev.event.kind == RequestEvent::Kind::kError) {
        // One request failed (its item or its step); the core already freed its place.
        publish();
        finish(e, FinishReason::kError, ev.event.message);
        continue;
      }
      e.stream->push(std::move(ev.event));
      if (ev.finished) {
        // Counters first, so a client that sees its end also sees its place freed.
        publish();
        finish(e, e.seq->finish_reason());
      }
    }
    drop_done();
    publish();
  }
  core_->set_plan_hook({});
  // Shutdown: everyone still here is aborted.
  for (auto& [id, e] : active_)
    if (e.stream) finish(e, FinishReason::kAbort);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : incoming_) {
    RequestEvent ev;
    ev.kind = RequestEvent::Kind::kFinished;
    ev.reason = FinishReason::kAbort;
    e.stream->push(std::move(ev));
  }
  incoming_.clear();
}

}  // namespace dgemma
