#include "api/generation.h"

#include <algorithm>
#include <ctime>
#include <mutex>
#include <optional>
#include <random>

#include "api/api_error.h"
#include "api/http/sse.h"
#include "api/openai/structured_output.h"
#include "util/error.h"
#include "util/log.h"
#include "util/timing.h"

namespace dgemma {

std::string make_request_id(const std::string& prefix) {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  uint64_t a, b;
  {
    std::lock_guard<std::mutex> lock(mu);
    a = rng();
    b = rng();
  }
  return prefix + fmt::format("{:016x}{:016x}", a, b);
}

struct Generation::Choice {
  int index = 0;
  size_t prompt_index = 0;
  std::shared_ptr<RequestStream> stream;
  std::unique_ptr<ChoiceOutput> out;
  bool done = false;
  std::string finish_reason;
  Json stop_reason = nullptr;
  double first_canvas_s = -1, last_canvas_s = -1;
  int canvases = 0;
  int64_t denoising_steps = 0;
  int64_t cached_tokens = 0;  // prompt tokens the engine's prefix cache served
  OutputDelta total;     // everything produced (non-stream response)
  std::optional<PinnedOutput> pinned;  // infilling: drops / sorts the pinned tokens
  size_t text_len = 0;   // bytes of text streamed so far (completions text_offset)
  GenerationRequest request;
  int64_t skip = 0;  // prefill tokens still to drop from the engine's output
};

struct Generation::Event {
  enum class Kind { kDelta, kPreview, kFinish, kError } kind = Kind::kDelta;
  Choice* choice = nullptr;
  OutputDelta delta;
  std::string text;     // error: the message
  PreviewJson preview;  // entropy and accepted: model engine only
};

Generation::Generation(GenerationContext ctx, ParsedRequest req, std::vector<PreparedPrompt> prompts, std::string id,
                       double arrival_s)
    : ctx_(ctx),
      req_(std::move(req)),
      prompts_(std::move(prompts)),
      id_(std::move(id)),
      arrival_s_(arrival_s),
      json_(CompletionJsonOptions{id_, static_cast<int64_t>(std::time(nullptr)), req_.model,
                                  req_.endpoint == Endpoint::kChat, ctx_.response_role, ctx_.tokens_as_ids,
                                  ctx_.reasoning_parser}),
      waker_(std::make_shared<StreamWaker>()) {}

Generation::~Generation() { cancel_all(); }

std::unique_ptr<ChoiceOutput> Generation::make_output(size_t prompt_index) const {
  ChoiceOutputOptions opts = base_options_;
  opts.starts_in_reasoning = opts.reasoning && prompts_[prompt_index].starts_in_reasoning;
  return std::make_unique<ChoiceOutput>(*ctx_.tokenizer, std::move(opts));
}

int64_t Generation::prompt_tokens(size_t prompt_index) const {
  const PreparedPrompt& p = prompts_[prompt_index];
  return static_cast<int64_t>(p.tokens.size()) + p.prefill_tokens;
}

void Generation::submit(Choice& c) {
  GenerationRequest g = c.request;
  c.skip = prompts_[c.prompt_index].prefill_tokens;
  c.stream = ctx_.engine->submit(std::move(g));
  c.stream->set_waker(waker_);
}

void Generation::start() {
  const bool chat = req_.endpoint == Endpoint::kChat;
  ChoiceOutputOptions& base = base_options_;
  base.stop = req_.stop;
  base.include_stop_str = req_.include_stop_str_in_output;
  base.skip_special_tokens = req_.skip_special_tokens;
  base.thinking_enabled = chat && thinking_enabled(req_.template_kwargs);
  base.tools = chat && req_.tool_choice != ToolChoiceMode::kNone;
  if (base.tools) base.declared_tools = std::make_shared<const DeclaredTools>(req_.tools);
  // With the tool parser on, the thought channel is parsed too (and, without --reasoning-parser,
  // dropped) so that a thought never reaches the content as if it were the answer.
  base.reasoning = chat && (ctx_.reasoning_parser || base.tools);
  base.drop_reasoning = !ctx_.reasoning_parser;
  base.parallel_tool_calls = req_.parallel_tool_calls;
  base.logprobs = req_.logprobs;
  if (ctx_.metrics) ctx_.metrics->on_request_params(req_.n, req_.max_tokens.value_or(0));

  int index = 0;
  try {
    for (size_t p = 0; p < prompts_.size(); ++p) {
      for (int j = 0; j < req_.n; ++j) {
        auto c = std::make_unique<Choice>();
        c->index = index++;
        c->prompt_index = p;
        c->out = make_output(p);
        GenerationRequest& g = c->request;
        g.prompt = prompts_[p].tokens;
        g.images = prompts_[p].images;
        g.params = req_.sampling;
        g.params.max_tokens = prompts_[p].max_tokens + prompts_[p].prefill_tokens;
        g.params.stop_token_ids = req_.stop_token_ids;
        g.params.previews = req_.stream && req_.include_previews;
        g.params.pins = prompts_[p].pins;
        g.params.guided = prompts_[p].guided;
        if (!prompts_[p].infill.pins.empty()) {
          g.params.pins = prompts_[p].infill.pins;
          c->pinned.emplace(prompts_[p].infill);
        }
        if (req_.sampling.seed) g.params.seed = *req_.sampling.seed + static_cast<uint64_t>(j);
        choices_.push_back(std::move(c));
        submit(*choices_.back());
      }
    }
  } catch (...) {
    cancel_all();
    throw;
  }
}

void Generation::cancel_all() {
  cancelled_ = true;
  for (auto& c : choices_)
    if (c->stream && !c->done) c->stream->cancel();
}

void Generation::abandon() {
  cancel_all();
  for (auto& c : choices_) {
    if (c->done) continue;
    c->done = true;
    c->finish_reason = "abort";
    if (!ctx_.metrics) continue;
    RequestRecord r;
    r.finished_reason = "abort";
    r.prompt_tokens = prompt_tokens(c->prompt_index);
    r.generation_tokens = c->out->completion_tokens();
    r.max_tokens_param = req_.max_tokens.value_or(0);
    r.n = req_.n;
    r.e2e_s = now_seconds() - arrival_s_;
    r.ttft_s = c->first_canvas_s >= 0 ? c->first_canvas_s - arrival_s_ : -1;
    ctx_.metrics->on_request_done(r);
  }
}

bool Generation::all_done() const {
  for (const auto& c : choices_)
    if (!c->done) return false;
  return true;
}

// Ends the whole request with error_: an error event for the choice, the metrics record, and every
// other choice cancelled.
void Generation::fail_request(Choice& c, std::vector<Event>& events) {
  c.done = true;
  Event e;
  e.kind = Event::Kind::kError;
  e.choice = &c;
  e.text = error_;
  events.push_back(std::move(e));
  if (ctx_.metrics) {
    RequestRecord r;
    r.finished_reason = "error";
    r.e2e_s = now_seconds() - arrival_s_;
    ctx_.metrics->on_request_done(r);
  }
  cancel_all();
}

void Generation::finish_choice(Choice& c, const std::string& reason, std::vector<Event>& events,
                               const RequestEvent* engine_ev) {
  c.done = true;
  c.finish_reason = reason;
  c.stop_reason = c.out->stop_reason();
  if (c.stop_reason.is_null() && engine_ev && engine_ev->stop_token_id >= 0) c.stop_reason = engine_ev->stop_token_id;
  if (engine_ev) c.cached_tokens = engine_ev->cached_tokens;
  Event e;
  e.kind = Event::Kind::kFinish;
  e.choice = &c;
  events.push_back(std::move(e));
  if (!ctx_.metrics) return;
  const double now = now_seconds();
  RequestRecord r;
  r.finished_reason = reason == "tool_calls" ? "stop" : reason;
  r.prompt_tokens = prompt_tokens(c.prompt_index);
  r.generation_tokens = c.out->completion_tokens();
  r.max_tokens_param = req_.max_tokens.value_or(0);
  r.n = req_.n;
  r.e2e_s = now - arrival_s_;
  r.ttft_s = c.first_canvas_s >= 0 ? c.first_canvas_s - arrival_s_ : -1;
  if (engine_ev) {
    r.queue_s = engine_ev->queue_ms / 1e3;
    r.prefill_s = engine_ev->prefill_ms / 1e3;
    r.decode_s = engine_ev->decode_ms / 1e3;
  }
  ctx_.metrics->on_request_done(r);
  DG_LOG_DEBUG("api", "{} choice {} finished: {} ({} prompt + {} completion tokens, {:.3f} s)", id_, c.index, reason,
               r.prompt_tokens, r.generation_tokens, r.e2e_s);
}

void Generation::emit(Choice& c, OutputDelta&& d, std::vector<Event>& events) {
  if (d.empty()) return;
  c.total.append(OutputDelta(d));
  Event e;
  e.choice = &c;
  e.delta = std::move(d);
  events.push_back(std::move(e));
}

void Generation::handle(Choice& c, RequestEvent&& ev, std::vector<Event>& events) {
  switch (ev.kind) {
    case RequestEvent::Kind::kCanvas: {
      const double now = now_seconds();
      const double gap = c.last_canvas_s < 0 ? -1 : now - c.last_canvas_s;
      if (c.first_canvas_s < 0) c.first_canvas_s = now;
      c.last_canvas_s = now;
      ++c.canvases;
      c.denoising_steps += ev.steps;
      if (ctx_.metrics) ctx_.metrics->on_canvas(ev.steps, ev.tokens.size(), gap);
      ++canvases_;
      steps_ += ev.steps;
      if (c.skip > 0) {
        // The assistant prefill: pinned, already the client's, not returned.
        const size_t drop = static_cast<size_t>(std::min<int64_t>(c.skip, static_cast<int64_t>(ev.tokens.size())));
        ev.tokens.erase(ev.tokens.begin(), ev.tokens.begin() + static_cast<std::ptrdiff_t>(drop));
        if (!ev.logprobs.empty())
          ev.logprobs.erase(ev.logprobs.begin(),
                            ev.logprobs.begin() + static_cast<std::ptrdiff_t>(std::min(drop, ev.logprobs.size())));
        if (ev.top_n > 0) {
          const auto n = static_cast<std::ptrdiff_t>(drop) * ev.top_n;
          ev.top_ids.erase(ev.top_ids.begin(), ev.top_ids.begin() + std::min<std::ptrdiff_t>(n, ev.top_ids.size()));
          ev.top_logprobs.erase(ev.top_logprobs.begin(),
                                ev.top_logprobs.begin() + std::min<std::ptrdiff_t>(n, ev.top_logprobs.size()));
        }
        if (!ev.pinned.empty())
          ev.pinned.erase(ev.pinned.begin(), ev.pinned.begin() + static_cast<std::ptrdiff_t>(std::min(drop, ev.pinned.size())));
        c.skip -= static_cast<int64_t>(drop);
      }
      if (c.pinned) c.pinned->feed(ev.tokens, ev.logprobs, ev.pinned, ev.top_n, &ev.top_ids, &ev.top_logprobs);
      emit(c, c.out->feed(ev.tokens, ev.logprobs, ev.top_n, ev.top_ids, ev.top_logprobs), events);
      if (c.out->stopped()) {
        c.stream->cancel();  // a stop string or id ended the output inside this canvas
        finish_choice(c, "stop", events, nullptr);
      }
      return;
    }
    case RequestEvent::Kind::kPreview: {
      Event e;
      e.kind = Event::Kind::kPreview;
      e.choice = &c;
      PreviewJson& p = e.preview;
      p.index = c.index;
      p.text = ctx_.tokenizer->decode(ev.tokens, false);
      for (int32_t t : ev.tokens)
        p.pieces.push_back(ctx_.tokenizer->decode(std::span<const int32_t>(&t, 1), false));
      p.step = ev.steps;
      p.canvas = c.canvases;
      p.entropy = ev.entropy;
      p.accepted = ev.accepted;
      events.push_back(std::move(e));
      return;
    }
    case RequestEvent::Kind::kFinished: {
      emit(c, c.out->finish(), events);
      std::string reason;
      switch (ev.reason) {
        case FinishReason::kStop: reason = c.out->saw_tool_calls() ? "tool_calls" : "stop"; break;
        case FinishReason::kLength: reason = "length"; break;
        case FinishReason::kAbort:
          if (cancelled_) {
            reason = "abort";
            break;
          }
          [[fallthrough]];
        case FinishReason::kError:
        case FinishReason::kNone:
          error_ = ev.message.empty() ? std::string("the request was aborted by the engine") : ev.message;
          break;
      }
      if (!error_.empty()) {
        fail_request(c, events);
        return;
      }
      finish_choice(c, reason, events, &ev);
      return;
    }
    case RequestEvent::Kind::kError: {
      error_ = ev.message.empty() ? std::string("engine error") : ev.message;
      fail_request(c, events);
      return;
    }
  }
}

Generation::Status Generation::pump(std::chrono::milliseconds timeout, std::vector<Event>& events) {
  const double deadline = now_seconds() + timeout.count() / 1e3;
  for (;;) {
    const uint64_t seq = waker_->seq();
    bool got = false;
    for (auto& c : choices_) {
      RequestEvent ev;
      while (!c->done && c->stream->try_pop(ev)) {
        got = true;
        try {
          handle(*c, std::move(ev), events);
        } catch (const std::exception& e) {
          // A bad canvas from the engine (e.g. an out-of-range id) fails this request, not the server.
          DG_LOG_ERROR("api", "{}: output processing failed: {}", id_, e.what());
          RequestEvent err;
          err.kind = RequestEvent::Kind::kError;
          err.message = fmt::format("output processing failed: {}", e.what());
          handle(*c, std::move(err), events);
        }
      }
    }
    if (!all_done() && ctx_.shutting_down && ctx_.shutting_down->load()) {
      error_ = "the server is shutting down";
      cut_ = true;
      abandon();  // counted as aborted; the engine requests are cancelled
      for (auto& c : choices_) c->done = true;
      Event e;
      e.kind = Event::Kind::kError;
      e.text = error_;
      events.push_back(std::move(e));
    }
    if (all_done()) return Status::kDone;
    if (got) return Status::kProgress;
    const double now = now_seconds();
    if (now >= deadline) return Status::kIdle;
    waker_->wait(seq, std::chrono::milliseconds(static_cast<int64_t>((deadline - now) * 1e3) + 1));
  }
}

std::string Generation::access_note() const {
  int64_t prompt = 0, completion = 0;
  for (size_t p = 0; p < prompts_.size(); ++p) prompt += prompt_tokens(p);
  for (const auto& c : choices_) completion += c->out->completion_tokens();
  return fmt::format("prompt_tokens={} completion_tokens={} canvases={} steps={}", prompt, completion, canvases_, steps_);
}

UsageCounts Generation::usage_counts() const {
  UsageCounts u;
  for (size_t p = 0; p < prompts_.size(); ++p) u.prompt_tokens += prompt_tokens(p);
  for (const auto& c : choices_) {
    u.completion_tokens += c->out->completion_tokens();
    u.canvases += c->canvases;
    u.denoising_steps += c->denoising_steps;
  }
  // Cached prompt tokens per prompt (the choices of one prompt share it: the largest share counts).
  std::vector<int64_t> cached(prompts_.size(), 0);
  for (const auto& c : choices_) cached[c->prompt_index] = std::max(cached[c->prompt_index], c->cached_tokens);
  for (int64_t v : cached) u.cached_tokens += v;
  u.canvas_length = ctx_.engine->stats().canvas_length;
  return u;
}

std::string Generation::sse_chunk(Json chunk) const {
  if (req_.continuous_usage) chunk["usage"] = usage_json(usage_counts());
  return sse_data(chunk);
}

std::string Generation::stream_prologue() {
  std::string out;
  for (auto& c : choices_) {
    const std::string& echo = prompts_[c->prompt_index].echo_text;
    if (req_.endpoint == Endpoint::kChat) {
      out += sse_chunk(json_.chunk(json_.role_choice(c->index)));
      // vLLM: the echoed last message follows the role chunk as content of its own.
      if (req_.echo && !echo.empty()) out += sse_chunk(json_.chunk(json_.echo_choice(c->index, echo)));
    } else {
      if (!req_.echo) continue;
      c->text_len += echo.size();
      out += sse_chunk(json_.chunk(json_.echo_choice(c->index, echo)));
    }
  }
  return out;
}

Generation::Status Generation::stream_step(std::chrono::milliseconds timeout, std::string& out) {
  if (epilogue_sent_) return Status::kDone;
  std::vector<Event> events;
  const Status st = pump(timeout, events);
  for (auto& e : events) {
    switch (e.kind) {
      case Event::Kind::kDelta: {
        Json choice = json_.delta_choice(e.choice->index, e.delta, e.choice->text_len);
        if (choice.is_null()) continue;
        e.choice->text_len += e.delta.content.size();
        out += sse_chunk(json_.chunk(std::move(choice)));
        break;
      }
      case Event::Kind::kPreview:
        if (req_.include_previews) out += sse_comment("dgemma.preview " + json_text(preview_json(e.preview)));
        break;
      case Event::Kind::kFinish: {
        const Choice& c = *e.choice;
        out += sse_chunk(json_.chunk(json_.finish_choice(c.index, c.finish_reason, c.stop_reason)));
        break;
      }
      case Event::Kind::kError: {
        if (error_sent_) break;
        error_sent_ = true;
        ApiError err;
        err.status = cut_ ? 503 : error_status_;
        err.type = cut_ ? "unavailable_error" : error_type_;
        if (!cut_ && !error_code_.empty()) err.code = error_code_;
        err.message = e.text;
        out += sse_data(error_json(err));
        break;
      }
    }
  }
  if (st == Status::kDone) {
    if (error_.empty()) {
      if (req_.include_usage) out += sse_data(json_.usage_chunk(usage_json(usage_counts())));
      out += sse_done();
    }
    epilogue_sent_ = true;
  }
  return st;
}

bool Generation::wait_done(std::chrono::milliseconds timeout) {
  const double deadline = now_seconds() + timeout.count() / 1e3;
  for (;;) {
    std::vector<Event> events;
    const double left = deadline - now_seconds();
    const Status st = pump(std::chrono::milliseconds(std::max<int64_t>(0, static_cast<int64_t>(left * 1e3))), events);
    if (st == Status::kDone) return true;
    if (st == Status::kIdle || now_seconds() >= deadline) return false;
  }
}

Json Generation::response_json() const {
  const bool chat = req_.endpoint == Endpoint::kChat;
  Json choices = Json::array();
  for (const auto& c : choices_) {
    FinishedChoice f;
    f.index = c->index;
    if (req_.echo) f.echo = prompts_[c->prompt_index].echo_text;
    f.logprobs = req_.logprobs;
    f.finish_reason = c->finish_reason;
    f.stop_reason = c->stop_reason;
    if (!chat && c->pinned && c->pinned->has_holes()) {
      f.holes.emplace();
      for (const auto& h : c->pinned->holes())
        f.holes->push_back(ctx_.tokenizer->decode(h, req_.skip_special_tokens));
    }
    choices.push_back(json_.finished_choice(f, c->total));
  }
  return json_.response(std::move(choices), usage_json(usage_counts()));
}

}  // namespace dgemma
