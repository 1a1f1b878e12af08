#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "engine/memory_plan.h"
#include "engine/params.h"
#include "util/error.h"
#include "util/log.h"
#include "util/timing.h"

namespace dgemma {

DiffusionEngine::DiffusionEngine(const EngineConfig& config, std::unique_ptr<Backend> backend,
                                 std::unique_ptr<DiffusionGemma> model, GenerationConfig generation, int64_t max_model_len)
    : config_(config),
      backend_(std::move(backend)),
      model_(std::move(model)),
      generation_(std::move(generation)),
      max_model_len_(max_model_len) {
  const ModelConfig& mc = model_->config();
  const int64_t C = mc.canvas_length;
  const int64_t chunk = prefill_chunk_tokens(mc, max_model_len_, config_.enable_chunked_prefill);  // engine/memory_plan.h
  const int64_t budget = config_.max_num_batched_tokens > 0
                             ? std::max(config_.max_num_batched_tokens, 2 * C)
                             : static_cast<int64_t>(config_.max_num_seqs) * 2 * C + chunk;
  runner_ = std::make_unique<BatchRunner>(*model_, budget, chunk);
  for (int i = 0; i < config_.max_num_seqs; ++i) {
    Slot s;
    s.kv = allocate_kv(mc, *backend_, max_model_len_, chunk);
    s.logits = backend_->alloc(ScalarType::kBF16, {C, mc.text.vocab_size});
    s.soft = backend_->alloc(ScalarType::kBF16, {C, mc.text.hidden_size});
    slots_.push_back(std::move(s));
  }
  thread_ = std::thread([this] { loop(); });
}

DiffusionEngine::~DiffusionEngine() {
  stop_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SequenceParams DiffusionEngine::resolve(const SamplingParams& p, uint64_t request_id) const {
  return resolve_sequence_params(p, generation_, {config_.seed, request_id, model_->config().canvas_length, vocab_size()});
}

std::shared_ptr<RequestStream> DiffusionEngine::submit(GenerationRequest request) {
  const int64_t plen = static_cast<int64_t>(request.prompt.size());
  if (plen == 0) throw Error(ErrorKind::kInvalidArgument, "the prompt is empty", "prompt");
  for (int32_t id : request.prompt)
    if (id < 0 || id >= vocab_size())
      throw Error(ErrorKind::kInvalidArgument, fmt::format("Prompt contains an invalid token id {}", id), "prompt");
  if (request.params.max_tokens < 1)
    throw Error(ErrorKind::kInvalidArgument, "max_tokens must be at least 1", "max_tokens");
  if (plen >= max_model_len_ || plen + request.params.max_tokens > max_model_len_)
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in "
                            "the messages, {} in the completion). Please reduce the length of the messages or completion.",
                            max_model_len_, plen + request.params.max_tokens, plen, request.params.max_tokens),
                "max_tokens");
  const uint64_t id = next_id_++;
  SequenceParams sp = resolve(request.params, id);
  auto stream = std::make_shared<RequestStream>(id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<int>(waiting_.size()) >= config_.max_queue)
      throw Error(ErrorKind::kResourceExhausted,
                  fmt::format("the server is busy: {} requests are already waiting (--max-queue)", waiting_.size()));
    waiting_.push_back({std::make_unique<Sequence>(id, std::move(request.prompt), std::move(sp)), stream});
    waiting_.back().seq->submit_time = now_seconds();
    waiting_count_ = static_cast<int64_t>(waiting_.size());
  }
  cv_.notify_all();
  return stream;
}

EngineStats DiffusionEngine::stats() const {
  EngineStats s;
  s.running = running_count_.load();
  s.waiting = waiting_count_.load();
  s.kv_usage = kv_usage_.load();
  s.max_num_seqs = config_.max_num_seqs;
  s.requests_cancelled = cancelled_.load();
  s.engine_steps = steps_.load();
  s.canvas_length = model_->config().canvas_length;
  return s;
}

void DiffusionEngine::finish(Running& r, FinishReason reason, const std::string& error) {
  RequestEvent ev;
  ev.kind = error.empty() ? RequestEvent::Kind::kFinished : RequestEvent::Kind::kError;
  ev.reason = reason;
  ev.message = error;
  ev.prompt_tokens = static_cast<int64_t>(r.seq->prompt.size());
  ev.completion_tokens = static_cast<int64_t>(r.seq->output.size());
  ev.steps = static_cast<int>(r.seq->denoise_steps_total);
  ev.stop_token_id = r.seq->stop_token_id;
  const double now = now_seconds();
  const Sequence& q = *r.seq;
  ev.queue_ms = (q.admit_time - q.submit_time) * 1e3;
  ev.prefill_ms = q.prefill_done_time > 0 ? (q.prefill_done_time - q.admit_time) * 1e3 : (now - q.admit_time) * 1e3;
  ev.decode_ms = q.prefill_done_time > 0 ? (now - q.prefill_done_time) * 1e3 : 0;
  if (reason == FinishReason::kAbort) ++cancelled_;
  // Free the slot and update the counters before the client can observe the end of its request.
  slots_[r.slot].busy = false;
  r.slot = -1;
  running_count_ = std::max<int64_t>(0, running_count_.load() - 1);
  r.stream->push(std::move(ev));
}

void DiffusionEngine::admit() {
  std::lock_guard<std::mutex> lock(mu_);
  // Drop cancelled waiters first (a disconnect while queued frees its place).
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (it->stream->cancelled()) {
      RequestEvent ev;
      ev.kind = RequestEvent::Kind::kFinished;
      ev.reason = FinishReason::kAbort;
      ev.prompt_tokens = static_cast<int64_t>(it->seq->prompt.size());
      it->stream->push(std::move(ev));
      it = waiting_.erase(it);
      ++cancelled_;
    } else {
      ++it;
    }
  }
  for (size_t si = 0; si < slots_.size() && !waiting_.empty(); ++si) {
    if (slots_[si].busy) continue;
    Waiting w = std::move(waiting_.front());
    waiting_.pop_front();
    Slot& slot = slots_[si];
    slot.busy = true;
    w.seq->kv = &slot.kv;
    w.seq->logits = slot.logits;
    w.seq->soft_embeds = slot.soft;
    runner_->start(*w.seq);
    w.seq->admit_time = now_seconds();
    running_.push_back({std::move(w.seq), std::move(w.stream), static_cast<int>(si)});
  }
  waiting_count_ = static_cast<int64_t>(waiting_.size());
}

void DiffusionEngine::loop() {
  std::vector<SequenceEvent> events;
  while (!stop_) {
    admit();
    // Cancelled running requests free their slot right away.
    for (auto& r : running_)
      if (r.stream->cancelled()) finish(r, FinishReason::kAbort);
    running_.erase(std::remove_if(running_.begin(), running_.end(), [](const Running& r) { return r.slot < 0; }),
                   running_.end());
    running_count_ = static_cast<int64_t>(running_.size());
    if (running_.empty()) {
      kv_usage_ = 0;
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop_ || !waiting_.empty(); });
      continue;
    }
    std::vector<Sequence*> seqs;
    for (auto& r : running_) seqs.push_back(r.seq.get());
    events.clear();
    try {
      runner_->step(seqs, events);
      ++steps_;
    } catch (const std::exception& e) {
      DG_LOG_ERROR("engine", "step failed: {}", e.what());
      for (auto& r : running_) finish(r, FinishReason::kError, std::string("engine error: ") + e.what());
      running_.clear();
      running_count_ = 0;
      continue;
    }
    for (auto& ev : events) {
      auto it = std::find_if(running_.begin(), running_.end(), [&](const Running& r) { return r.seq.get() == ev.seq; });
      if (it == running_.end()) continue;
      RequestEvent out;
      out.kind = ev.kind == SequenceEvent::Kind::kCanvas ? RequestEvent::Kind::kCanvas : RequestEvent::Kind::kPreview;
      out.tokens = std::move(ev.tokens);
      out.logprobs = std::move(ev.logprobs);
      out.steps = ev.steps;
      out.denoise_ms = ev.denoise_ms;
      it->stream->push(std::move(out));
      if (ev.finished) finish(*it, it->seq->finish);
    }
    // KV usage: tokens held over the capacity of all slots (vLLM's kv_cache_usage_perc).
    int64_t used = 0;
    for (auto& r : running_)
      if (r.slot >= 0) used += r.seq->kv->encoded;
    kv_usage_ = static_cast<double>(used) / static_cast<double>(max_model_len_ * static_cast<int64_t>(slots_.size()));
    running_.erase(std::remove_if(running_.begin(), running_.end(), [](const Running& r) { return r.slot < 0; }),
                   running_.end());
    running_count_ = static_cast<int64_t>(running_.size());
  }
  // Shutdown: everyone still here is aborted.
  for (auto& r : running_) finish(r, FinishReason::kAbort);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& w : waiting_) {
    RequestEvent ev;
    ev.kind = RequestEvent::Kind::kFinished;
    ev.reason = FinishReason::kAbort;
    w.stream->push(std::move(ev));
  }
  waiting_.clear();
}

}  // namespace dgemma
