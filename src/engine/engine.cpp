#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include <fmt/ranges.h>

#include "engine/memory_plan.h"
#include "engine/params.h"
#include "util/error.h"
#include "util/log.h"
#include "util/timing.h"

namespace dgemma {
namespace {

ModelCoreOptions core_options(const EngineConfig& c, const EngineSizing& s) {
  ModelCoreOptions o;
  o.max_num_seqs = c.max_num_seqs;
  o.max_num_batched_tokens = s.max_num_batched_tokens;
  o.prefill_chunk = s.prefill_chunk;
  o.kv_plan = s.kv;
  o.prefix_caching = c.enable_prefix_caching;
  return o;
}

}  // namespace

int64_t warm_up_profile_prompt_len(const EngineSizing& sizing, int64_t canvas_length, int batch, int64_t floor) {
  const int64_t C = canvas_length, n = std::max(batch, 1);
  int64_t len = (sizing.max_num_batched_tokens + n - 1) / n;
  len = std::min<int64_t>(len, sizing.max_model_len - C - 1);
  if (sizing.kv.full_tokens > 0) len = std::min<int64_t>(len, sizing.kv.full_tokens / n - 3 * C);
  return std::max(len, floor);
}

DiffusionEngine::DiffusionEngine(const EngineConfig& config, std::unique_ptr<Backend> backend,
                                 std::unique_ptr<DiffusionGemma> model, GenerationConfig generation, EngineSizing sizing)
    : config_(config),
      backend_(std::move(backend)),
      model_(std::move(model)),
      model_config_(model_->config()),
      generation_(std::move(generation)),
      sizing_(sizing) {
  model_core_ = std::make_unique<ModelCore>(*model_, core_options(config_, sizing_));
  if (config_.step_dump) model_core_->runner().set_step_dump(config_.step_dump);
  core_ = &model_core_->core();
  cap_allocator();
  if (config_.warmup) warm_up();
  if (!config_.enforce_eager) record_graphs();
  start();
}

DiffusionEngine::DiffusionEngine(const EngineConfig& config, std::unique_ptr<TensorParallelModel> model,
                                 GenerationConfig generation, EngineSizing sizing)
    : config_(config),
      tp_model_(std::move(model)),
      model_config_(tp_model_->config()),
      generation_(std::move(generation)),
      sizing_(sizing) {
  model_core_ = std::make_unique<ModelCore>(*tp_model_, core_options(config_, sizing_));
  if (config_.step_dump) model_core_->runner().set_step_dump(config_.step_dump);  // rank 0's tensors
  core_ = &model_core_->core();
  start();
}

DiffusionEngine::DiffusionEngine(const EngineConfig& config, std::unique_ptr<ModelRunner> runner, ModelConfig model_config,
                                 GenerationConfig generation, EngineSizing sizing)
    : config_(config), model_config_(std::move(model_config)), generation_(std::move(generation)), sizing_(sizing) {
  own_core_ = make_engine_core(model_config_, core_options(config_, sizing_), sizing_.kv, std::move(runner));
  core_ = own_core_.get();
  start();
}

void DiffusionEngine::cap_allocator() {
  if (!backend_ || sizing_.step_ceiling_bytes == 0) return;
  // What the allocator holds now is the weights and the pool (nothing of the start-up stays cached);
  // steps may take the plan's step ceiling on top, and no more.
  backend_->release_cached_memory();
  const uint64_t held = backend_->allocator_stats().reserved;
  const uint64_t steps = sizing_.step_ceiling_bytes + sizing_.graph_pool_bytes;
  backend_->set_allocator_ceiling(held + steps);
  const double gib = double(uint64_t{1} << 30);
  DG_LOG_INFO("engine",
              "allocator ceiling {:.2f} GiB: {:.2f} GiB of weights and KV pool + the plan's {:.2f} GiB for steps and "
              "{:.2f} GiB for CUDA graphs",
              (held + steps) / gib, held / gib, sizing_.step_ceiling_bytes / gib, sizing_.graph_pool_bytes / gib);
}

std::vector<int> engine_batch_buckets(int max_num_seqs) {
  std::vector<int> buckets;
  for (int b = 1; b < max_num_seqs; b *= 2) buckets.push_back(b);
  buckets.push_back(std::max(max_num_seqs, 1));
  return buckets;
}

void DiffusionEngine::record_graphs() {
  // One denoising step per batch-size bucket recorded as a CUDA graph (backends without graphs record
  // nothing), so that every step of denoising canvases replays as one launch, the first request's
  // included. A recording that fails leaves the engine running its steps op by op.
  if (!backend_ || !backend_->supports_graphs()) return;
  Stopwatch sw;
  const std::vector<int> buckets = engine_batch_buckets(config_.max_num_seqs);
  const AllocatorStats a0 = backend_->allocator_stats();
  try {
    const std::vector<int> made = model_core_->runner().enable_graphs(buckets, sizing_.max_model_len);
    const AllocatorStats a1 = backend_->allocator_stats();
    DG_LOG_INFO("engine", "CUDA graphs: denoising steps of {} canvases recorded in {:.0f} ms ({:.2f} GiB graph pool, "
                "the plan's {:.2f} GiB); --enforce-eager turns them off",
                fmt::join(made, ","), sw.ms(), (a1.graph_pool - a0.graph_pool) / double(uint64_t{1} << 30),
                sizing_.graph_pool_bytes / double(uint64_t{1} << 30));
  } catch (const Error& e) {
    DG_LOG_WARN("engine", "CUDA graphs off: recording the denoising steps failed ({}); every step runs op by op", e.what());
  }
}

void DiffusionEngine::warm_up() {
  // The first steps of a process pay one-time costs: kernel modules load on first use, cuBLAS picks
  // and loads its kernels per shape, the allocator's cache grows. Paying them here, once per
  // batch-size bucket (1, 2, 4, ... up to --max-num-seqs), makes the first request as fast as the
  // tenth. Each warm-up sequence prefills a prompt of its own (no prefix hits) and runs two steps of one
  // canvas; its pages are freed and dropped from the prefix cache, the scheduler's statistics reset,
  // and its ids are far above the request ids.
  //
  // It is also the memory plan's profile run (as vLLM's): the last batch's prompts together fill a
  // whole step budget, so its steps are as large as the scheduler makes them, and what they held in
  // the allocator (under the plan's ceiling: a step that needs more fails here, at start-up, with the
  // numbers) and what the process took outside the allocator are measured against the plan.
  Stopwatch sw;
  const int64_t C = model_config_.canvas_length;
  const int64_t prompt_len = std::min<int64_t>(2 * C, sizing_.max_model_len - C - 1);
  if (prompt_len < 1) return;
  const std::vector<int> buckets = engine_batch_buckets(config_.max_num_seqs);
  const int n_last = buckets.back();
  const int64_t profile_len = warm_up_profile_prompt_len(sizing_, C, n_last, prompt_len);
  const bool measure = backend_ && sizing_.step_ceiling_bytes > 0;
  const MemoryInfo mem0 = measure ? backend_->memory_info() : MemoryInfo{};
  const AllocatorStats a0 = measure ? backend_->allocator_stats() : AllocatorStats{};
  uint64_t id = uint64_t{1} << 62;
  for (int b : buckets) {
    const int64_t len = b == n_last ? profile_len : prompt_len;
    std::vector<std::unique_ptr<Sequence>> seqs;
    std::vector<Sequence*> ptrs;
    for (int i = 0; i < b; ++i) {
      SequenceParams p = resolve(SamplingParams{}, id);
      p.max_tokens = C;
      p.ignore_eos = true;
      p.diffusion.max_denoising_steps = 2;
      std::vector<int32_t> prompt(static_cast<size_t>(len));
      for (int64_t j = 0; j < len; ++j)
        prompt[static_cast<size_t>(j)] = static_cast<int32_t>((j * 7919 + static_cast<int64_t>(id % 4096) * 131) % model_config_.text.vocab_size);
      seqs.push_back(model_core_->make_sequence(id++, std::move(prompt), p));
      ptrs.push_back(seqs.back().get());
    }
    // A failed step ends its sequences with an error event (engine_core.cpp); here that is a start-up
    // failure (e.g. a step over the allocator's ceiling), not something to serve with.
    for (const CoreEvent& ev : model_core_->run(ptrs))
      if (ev.kind == CoreEvent::Kind::kError)
        fail(ev.message.find("out of memory") != std::string::npos ? ErrorKind::kResourceExhausted : ErrorKind::kInternal,
             "the start-up warm-up failed at batch size {} (prompts of {} tokens): {}", b, len, ev.message);
  }
  core_->blocks().drop_unreferenced_cache();
  core_->scheduler().reset_stats();
  DG_LOG_INFO("engine", "warm-up: batch sizes {} in {:.0f} ms (the last: prompts of {} tokens)", fmt::join(buckets, ","),
              sw.ms(), profile_len);
  if (!measure) return;
  const MemoryInfo mem1 = backend_->memory_info();
  const AllocatorStats a1 = backend_->allocator_stats();
  const double gib = double(uint64_t{1} << 30), mib = double(uint64_t{1} << 20);
  // Outside the allocator: what the device has in use less what the allocator holds.
  const auto outside = [](const MemoryInfo& m, const AllocatorStats& a) {
    const uint64_t used = m.total - m.free;
    return used > a.reserved ? used - a.reserved : uint64_t{0};
  };
  const uint64_t out0 = sizing_.outside_allocator_bytes > 0 ? sizing_.outside_allocator_bytes : outside(mem0, a0);
  const uint64_t out1 = outside(mem1, a1);
  const uint64_t grew = out1 > out0 ? out1 - out0 : 0;
  DG_LOG_INFO("engine",
              "memory profile (warm-up): steps held at most {:.2f} GiB beyond the weights and pool ({:.2f} GiB reserved "
              "at the peak) of the plan's {:.2f} GiB step ceiling; outside the allocator the process grew by {:.0f} MiB "
              "(plan: {:.0f} MiB)",
              (a1.peak_in_use - std::min(a1.peak_in_use, a0.in_use)) / gib,
              (a1.peak_reserved - std::min(a1.peak_reserved, a0.reserved)) / gib, sizing_.step_ceiling_bytes / gib,
              grew / mib, sizing_.runtime_reserve_bytes / mib);
  if (grew > sizing_.runtime_reserve_bytes)
    DG_LOG_WARN("engine",
                "the process took {:.0f} MiB outside the allocator since the memory plan, more than its {:.0f} MiB "
                "reserve: the GPU budget is exceeded by the difference (lower --gpu-memory-utilization to keep it)",
                grew / mib, sizing_.runtime_reserve_bytes / mib);
}

void DiffusionEngine::start() {
  thread_ = std::thread([this] { loop(); });
}

DiffusionEngine::~DiffusionEngine() {
  stop_ = true;
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (backend_ && sizing_.step_ceiling_bytes > 0) {
    const AllocatorStats a = backend_->allocator_stats();
    DG_LOG_INFO("engine",
                "allocator at shutdown: peak {:.2f} GiB reserved of its {:.2f} GiB ceiling ({:.2f} GiB in use at the "
                "peak); {} cached blocks given back to stay under it",
                a.peak_reserved / double(uint64_t{1} << 30), a.ceiling / double(uint64_t{1} << 30),
                a.peak_in_use / double(uint64_t{1} << 30), a.evictions);
  }
}

SequenceParams DiffusionEngine::resolve(const SamplingParams& p, uint64_t request_id) const {
  return resolve_sequence_params(p, generation_, {config_.seed, request_id, model_config_.canvas_length, vocab_size()});
}

std::shared_ptr<RequestStream> DiffusionEngine::submit(GenerationRequest request) {
  const int64_t plen = static_cast<int64_t>(request.prompt.size());
  const int64_t max_len = sizing_.max_model_len;
  if (plen == 0) throw Error(ErrorKind::kInvalidArgument, "the prompt is empty", "prompt");
  for (int32_t id : request.prompt)
    if (id < 0 || id >= vocab_size())
      throw Error(ErrorKind::kInvalidArgument, fmt::format("Prompt contains an invalid token id {}", id), "prompt");
  if (request.params.max_tokens < 1)
    throw Error(ErrorKind::kInvalidArgument, "max_tokens must be at least 1", "max_tokens");
  if (plen >= max_len || plen + request.params.max_tokens > max_len)
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in "
                            "the messages, {} in the completion). Please reduce the length of the messages or completion.",
                            max_len, plen + request.params.max_tokens, plen, request.params.max_tokens),
                "max_tokens");
  if (!core_->scheduler().can_ever_fit(plen, request.params.max_tokens))
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("this request needs {} KV-cache pages of {} tokens ({} prompt tokens, up to {} completion "
                            "tokens) but the whole cache holds {}; raise --gpu-memory-utilization or --kv-cache-memory, "
                            "or shorten the request",
                            core_->scheduler().max_pages_needed(plen, request.params.max_tokens),
                            model_config_.canvas_length, plen, request.params.max_tokens,
                            core_->blocks().total_pages(KvGroup::kFull)),
                "max_tokens");
  const uint64_t id = next_id_++;
  SequenceParams sp = resolve(request.params, id);
  auto stream = std::make_shared<RequestStream>(id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Requests the next step admits to a free running place are not queued (admission happens
    // when a step is planned, and the engine may be inside a long step when they arrive).
    const int64_t free_places = std::max<int64_t>(0, config_.max_num_seqs - running_count_.load());
    const int64_t waiting = static_cast<int64_t>(incoming_.size()) + waiting_count_.load() - free_places;
    if (waiting >= config_.max_queue)
      throw Error(ErrorKind::kResourceExhausted,
                  fmt::format("the server is busy: {} requests are already waiting (--max-queue)", waiting));
    auto seq = std::make_unique<Sequence>(id, std::move(request.prompt), std::move(sp), model_config_.canvas_length,
                                          vocab_size());
    seq->submit_time = now_seconds();
    incoming_.push_back({std::move(seq), stream});
  }
  cv_.notify_all();
  return stream;
}

EngineStats DiffusionEngine::stats() const {
  EngineStats s;
  s.running = running_count_.load();
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.waiting = waiting_count_.load() + static_cast<int64_t>(incoming_.size());
  }
  s.kv_usage = kv_usage_.load();
  s.max_num_seqs = config_.max_num_seqs;
  s.max_queue = config_.max_queue;
  s.requests_cancelled = cancelled_.load();
  s.engine_steps = steps_.load();
  s.num_preemptions = preemptions_.load();
  s.prefix_cache_queries = prefix_queries_.load();
  s.prefix_cache_hits = prefix_hits_.load();
  s.canvas_length = model_config_.canvas_length;
  return s;
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

void DiffusionEngine::loop() {
  std::vector<CoreEvent> events;
  if (trace_) core_->set_trace_sink(trace_);
  auto publish_counts = [&] {
    running_count_ = static_cast<int64_t>(core_->scheduler().running().size());
    waiting_count_ = static_cast<int64_t>(core_->scheduler().waiting().size());
    kv_usage_ = core_->scheduler().kv_usage();
    const SchedulerStats& st = core_->scheduler().stats();
    preemptions_ = st.preemptions;
    prefix_queries_ = st.prefix_queries;
    prefix_hits_ = st.prefix_hits;
  };
  // Admissions and preemptions show before the step runs (--max-queue counts the waiting ones).
  core_->set_plan_hook([&](const StepPlan&) { publish_counts(); });
  auto drop_done = [&] {
    active_.erase(std::remove_if(active_.begin(), active_.end(), [](const Entry& e) { return !e.stream; }), active_.end());
  };
  while (!stop_) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!incoming_.empty()) {
        active_.push_back(std::move(incoming_.front()));
        incoming_.pop_front();
        core_->add(active_.back().seq.get());
      }
      // Under the lock, so submit() never misses them between the two counts.
      waiting_count_ = static_cast<int64_t>(core_->scheduler().waiting().size());
    }
    if (trace_) core_->set_trace_sink(trace_);
    // Cancelled requests (client gone) leave at once, queued or running.
    for (auto& e : active_)
      if (e.stream && e.stream->cancelled()) {
        core_->abort(e.seq.get());
        finish(e, FinishReason::kAbort);
      }
    drop_done();
    publish_counts();
    if (!core_->has_work()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop_ || !incoming_.empty(); });
      continue;
    }
    events.clear();
    try {
      core_->step(events);
      ++steps_;
    } catch (const std::exception& e) {
      DG_LOG_ERROR("engine", "step failed: {}", e.what());
      for (auto& en : active_) {
        core_->abort(en.seq.get());
        finish(en, FinishReason::kError, std::string("engine error: ") + e.what());
      }
      active_.clear();
      publish_counts();
      continue;
    }
    for (auto& ev : events) {
      auto it = std::find_if(active_.begin(), active_.end(), [&](const Entry& e) { return e.seq.get() == ev.seq; });
      if (it == active_.end() || !it->stream) continue;
      if (ev.kind == CoreEvent::Kind::kError) {
        // One request failed (its item or its step); the core already freed its place.
        running_count_ = static_cast<int64_t>(core_->scheduler().running().size());
        finish(*it, FinishReason::kError, ev.message);
        continue;
      }
      RequestEvent out;
      out.kind = ev.kind == CoreEvent::Kind::kCanvas ? RequestEvent::Kind::kCanvas : RequestEvent::Kind::kPreview;
      out.tokens = std::move(ev.tokens);
      out.logprobs = std::move(ev.logprobs);
      out.top_n = ev.top.n;
      out.top_ids = std::move(ev.top.ids);
      out.top_logprobs = std::move(ev.top.logprobs);
      out.pinned = std::move(ev.pinned);
      out.entropy = std::move(ev.entropy);
      out.accepted = std::move(ev.accepted);
      out.steps = ev.steps;
      out.denoise_ms = ev.denoise_ms;
      it->stream->push(std::move(out));
      if (ev.finished) {
        // Counters first, so a client that sees its end also sees its place freed.
        running_count_ = static_cast<int64_t>(core_->scheduler().running().size());
        finish(*it, it->seq->finish_reason());
      }
    }
    drop_done();
    publish_counts();
  }
  core_->set_plan_hook({});
  // Shutdown: everyone still here is aborted.
  for (auto& e : active_)
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
