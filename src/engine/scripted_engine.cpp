#include "engine/scripted_engine.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <random>
#include <thread>

#include "engine/limits.h"
#include "util/counter_rng.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mmap_file.h"
#include "util/timing.h"

namespace dgemma {
namespace {

struct ScriptCanvas {
  std::vector<int32_t> tokens;
  std::string error;     // non-empty: the engine fails the request here (kError) instead of committing
  double delay_ms = -1;  // < 0: the script default
  int steps = -1;
};

struct ScriptReply {
  std::vector<std::string> when;  // all must occur in the decoded prompt; empty: matches anything
  std::vector<ScriptCanvas> canvases;
  int random_canvases = 0;        // > 0: this many canvases of seeded filler tokens, then EOS
};

struct Script {
  int canvas_length = 256;
  int steps = 8;
  double canvas_delay_ms = 20;
  double prefill_delay_ms = 0;
  int preview_steps = 2;
  std::vector<int32_t> filler;   // token ids random canvases are drawn from
  std::vector<ScriptReply> replies;
  ScriptReply fallback;          // when no reply matches
};

const char* kDefaultFiller[] = {" alpha", " beta", " gamma", " delta", " river", " stone", " light", " cloud",
                                " seven", " green", " quiet", " table", " north", " paper", " bridge", " maple"};

ScriptCanvas parse_canvas(const Json& c, const ScriptedEngineOptions& opt, const std::string& where) {
  ScriptCanvas out;
  if (c.is_string()) {
    out.tokens = opt.encode(c.get<std::string>());
    return out;
  }
  if (!c.is_object()) fail_file("{}: a canvas must be a string or an object", where);
  if (c.contains("error")) {
    if (!c["error"].is_string() || c["error"].get<std::string>().empty())
      fail_file("{}.error must be a non-empty string", where);
    out.error = c["error"].get<std::string>();
  } else if (c.contains("text")) {
    if (!c["text"].is_string()) fail_file("{}.text must be a string", where);
    out.tokens = opt.encode(c["text"].get<std::string>());
  } else if (c.contains("tokens")) {
    if (!c["tokens"].is_array()) fail_file("{}.tokens must be an array of token ids", where);
    for (const auto& t : c["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= opt.vocab_size)
        fail_file("{}.tokens: {} is not a token id below {}", where, t.dump(), opt.vocab_size);
      out.tokens.push_back(t.get<int32_t>());
    }
  } else {
    fail_file("{}: a canvas needs \"text\", \"tokens\" or \"error\"", where);
  }
  if (c.contains("delay_ms")) {
    if (!c["delay_ms"].is_number() || c["delay_ms"].get<double>() < 0) fail_file("{}.delay_ms must be >= 0", where);
    out.delay_ms = c["delay_ms"].get<double>();
  }
  if (c.contains("steps")) {
    if (!c["steps"].is_number_integer() || c["steps"].get<int>() < 1) fail_file("{}.steps must be an integer >= 1", where);
    out.steps = c["steps"].get<int>();
  }
  return out;
}

ScriptReply parse_reply(const Json& r, const ScriptedEngineOptions& opt, const std::string& where) {
  if (!r.is_object()) fail_file("{} must be an object", where);
  ScriptReply out;
  if (r.contains("when")) {
    const Json& w = r["when"];
    if (w.is_string()) out.when.push_back(w.get<std::string>());
    else if (w.is_array()) {
      for (const auto& s : w) {
        if (!s.is_string()) fail_file("{}.when entries must be strings", where);
        out.when.push_back(s.get<std::string>());
      }
    } else fail_file("{}.when must be a string or an array of strings", where);
  }
  if (r.contains("canvases")) {
    if (!r["canvases"].is_array()) fail_file("{}.canvases must be an array", where);
    for (size_t i = 0; i < r["canvases"].size(); ++i)
      out.canvases.push_back(parse_canvas(r["canvases"][i], opt, fmt::format("{}.canvases[{}]", where, i)));
  }
  if (r.contains("random_canvases")) {
    if (!r["random_canvases"].is_number_integer() || r["random_canvases"].get<int>() < 1)
      fail_file("{}.random_canvases must be an integer >= 1", where);
    out.random_canvases = r["random_canvases"].get<int>();
  }
  if (out.canvases.empty() && out.random_canvases == 0) fail_file("{} needs \"canvases\" or \"random_canvases\"", where);
  if (!out.canvases.empty() && out.random_canvases > 0)
    fail_file("{}: \"canvases\" and \"random_canvases\" are exclusive", where);
  return out;
}

Script parse_script(const Json& j, const ScriptedEngineOptions& opt) {
  if (!j.is_object()) fail_file("scripted engine: the script must be a JSON object");
  Script s;
  auto get_num = [&](const char* key, double lo, double hi, double def) {
    if (!j.contains(key)) return def;
    if (!j[key].is_number() || j[key].get<double>() < lo || j[key].get<double>() > hi)
      fail_file("scripted engine: \"{}\" must be a number in [{}, {}]", key, lo, hi);
    return j[key].get<double>();
  };
  s.canvas_length = static_cast<int>(get_num("canvas_length", 1, limits::kMaxCanvasLength, 256));
  s.steps = static_cast<int>(get_num("steps", 1, limits::kMaxDenoisingSteps, 8));
  s.canvas_delay_ms = get_num("canvas_delay_ms", 0, 600000, 20);
  s.prefill_delay_ms = get_num("prefill_delay_ms", 0, 600000, 0);
  s.preview_steps = static_cast<int>(get_num("preview_steps", 1, 64, 2));
  std::vector<std::string> words;
  if (j.contains("filler")) {
    if (!j["filler"].is_array() || j["filler"].empty()) fail_file("scripted engine: \"filler\" must be a non-empty array");
    for (const auto& w : j["filler"]) {
      if (!w.is_string()) fail_file("scripted engine: \"filler\" entries must be strings");
      words.push_back(w.get<std::string>());
    }
  } else {
    words.assign(std::begin(kDefaultFiller), std::end(kDefaultFiller));
  }
  for (const auto& w : words)
    for (int32_t id : opt.encode(w))
      if (std::find(opt.eos_ids.begin(), opt.eos_ids.end(), id) == opt.eos_ids.end()) s.filler.push_back(id);
  if (s.filler.empty()) fail_file("scripted engine: the filler words produced no tokens");
  if (j.contains("replies")) {
    if (!j["replies"].is_array()) fail_file("scripted engine: \"replies\" must be an array");
    for (size_t i = 0; i < j["replies"].size(); ++i)
      s.replies.push_back(parse_reply(j["replies"][i], opt, fmt::format("replies[{}]", i)));
  }
  s.fallback.random_canvases = 1;
  if (j.contains("default")) s.fallback = parse_reply(j["default"], opt, "default");
  return s;
}

struct Job {
  std::shared_ptr<RequestStream> stream;
  GenerationRequest req;
  const ScriptReply* reply = nullptr;
  uint64_t seed = 0;
  size_t canvas = 0;        // next canvas index
  int preview = 0;          // previews already sent for the current canvas
  int64_t produced = 0;
  double submitted = 0, started = 0, prefill_done = 0;
  double next_time = 0;     // when the next event is due
};

}  // namespace

struct ScriptedEngine::Impl {
  ScriptedEngineOptions opt;
  Script script;
  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Job>> waiting;
  std::list<std::unique_ptr<Job>> running;
  std::thread worker;
  bool stop = false;
  uint64_t next_id = 1;
  uint64_t unseeded = 0;
  int64_t cancelled = 0;
  int64_t steps = 0;

  bool is_eos(const Job&, int32_t id) const {
    return std::find(opt.eos_ids.begin(), opt.eos_ids.end(), id) != opt.eos_ids.end();
  }

  size_t total_canvases(const Job& j) const {
    return j.reply->random_canvases > 0 ? static_cast<size_t>(j.reply->random_canvases) : j.reply->canvases.size();
  }

  std::vector<int32_t> filler_canvas(const Job& j, size_t canvas) const {
    std::vector<int32_t> out(static_cast<size_t>(script.canvas_length));
    for (size_t p = 0; p < out.size(); ++p)
      out[p] = script.filler[rng::splitmix64(j.seed ^ rng::splitmix64(canvas * 1000003ULL + p)) % script.filler.size()];
    return out;
  }

  // The tokens of canvas k, before trimming. Past the script's end (only with ignore_eos) filler follows.
  std::vector<int32_t> canvas_tokens(const Job& j, size_t k) const {
    if (j.reply->random_canvases == 0 && k < j.reply->canvases.size()) return j.reply->canvases[k].tokens;
    return filler_canvas(j, k);
  }
  double canvas_delay(const Job& j, size_t k) const {
    if (j.reply->random_canvases == 0 && k < j.reply->canvases.size() && j.reply->canvases[k].delay_ms >= 0)
      return j.reply->canvases[k].delay_ms;
    return script.canvas_delay_ms;
  }
  int canvas_steps(const Job& j, size_t k) const {
    if (j.reply->random_canvases == 0 && k < j.reply->canvases.size() && j.reply->canvases[k].steps > 0)
      return j.reply->canvases[k].steps;
    return script.steps;
  }

  void finish(Job& j, FinishReason reason, double now, int32_t stop_id = -1) {
    RequestEvent ev;
    ev.stop_token_id = stop_id;
    ev.kind = RequestEvent::Kind::kFinished;
    ev.reason = reason;
    ev.prompt_tokens = static_cast<int64_t>(j.req.prompt.size());
    ev.completion_tokens = j.produced;
    ev.queue_ms = j.started > 0 ? (j.started - j.submitted) * 1e3 : (now - j.submitted) * 1e3;
    ev.prefill_ms = j.prefill_done > 0 ? (j.prefill_done - j.started) * 1e3 : 0;
    ev.decode_ms = j.prefill_done > 0 ? (now - j.prefill_done) * 1e3 : 0;
    j.stream->push(std::move(ev));
  }

  // Emits the next event of a running job; returns false when the job is finished.
  bool advance(Job& j, double now) {
    if (j.prefill_done == 0) {
      j.prefill_done = now;
      j.next_time = now + canvas_delay(j, 0) / 1e3 / (j.req.params.previews ? script.preview_steps + 1 : 1);
      return true;
    }
    const size_t k = j.canvas;
    std::vector<int32_t> tokens = canvas_tokens(j, k);
    if (j.req.params.previews && j.preview < script.preview_steps) {
      // A preview: the canvas with a shrinking share of filler, as if still denoising.
      ++j.preview;
      std::vector<int32_t> noisy = filler_canvas(j, k + 7919);
      const size_t keep = tokens.size() * static_cast<size_t>(j.preview) / static_cast<size_t>(script.preview_steps + 1);
      for (size_t p = 0; p < std::min(keep, noisy.size()) && p < tokens.size(); ++p) noisy[p] = tokens[p];
      RequestEvent ev;
      ev.kind = RequestEvent::Kind::kPreview;
      ev.tokens = std::move(noisy);
      ev.steps = j.preview;
      j.stream->push(std::move(ev));
      j.next_time = now + canvas_delay(j, k) / 1e3 / (script.preview_steps + 1);
      return true;
    }
    j.preview = 0;
    ++steps;
    if (j.reply->random_canvases == 0 && k < j.reply->canvases.size() && !j.reply->canvases[k].error.empty()) {
      RequestEvent ev;
      ev.kind = RequestEvent::Kind::kError;
      ev.message = j.reply->canvases[k].error;
      j.stream->push(std::move(ev));
      return false;
    }
    FinishReason reason = FinishReason::kNone;
    int32_t stop_id = -1;
    const auto& extra = j.req.params.stop_token_ids;
    for (size_t p = 0; p < tokens.size(); ++p) {
      const bool user_stop = std::find(extra.begin(), extra.end(), tokens[p]) != extra.end();
      if (user_stop || (!j.req.params.ignore_eos && is_eos(j, tokens[p]))) {
        if (user_stop) stop_id = tokens[p];
        tokens.resize(p);
        reason = FinishReason::kStop;
        break;
      }
    }
    const int64_t room = std::min(j.req.params.max_tokens,
                                  opt.max_model_len - static_cast<int64_t>(j.req.prompt.size())) - j.produced;
    if (static_cast<int64_t>(tokens.size()) >= room && reason == FinishReason::kNone) {
      tokens.resize(static_cast<size_t>(std::max<int64_t>(0, room)));
      reason = FinishReason::kLength;
    } else if (static_cast<int64_t>(tokens.size()) > room) {
      tokens.resize(static_cast<size_t>(std::max<int64_t>(0, room)));
      reason = FinishReason::kLength;
    }
    if (reason == FinishReason::kNone && k + 1 >= total_canvases(j) && !j.req.params.ignore_eos)
      reason = FinishReason::kStop;  // the end of a scripted reply acts as EOS
    j.produced += static_cast<int64_t>(tokens.size());
    RequestEvent ev;
    ev.kind = RequestEvent::Kind::kCanvas;
    ev.steps = canvas_steps(j, k);
    ev.denoise_ms = canvas_delay(j, k);
    if (j.req.params.logprobs) {
      ev.logprobs.resize(tokens.size());
      for (size_t p = 0; p < tokens.size(); ++p)
        ev.logprobs[p] = -static_cast<float>((rng::splitmix64(j.seed + k * 4099 + p) % 1000) / 250.0);
      // Scripted alternatives: the token itself first, then its successors in the vocabulary, each
      // half a nat less likely (the format's shape, not a model's distribution).
      if (const int n = j.req.params.top_logprobs; n > 0) {
        ev.top_n = n;
        for (size_t p = 0; p < tokens.size(); ++p)
          for (int a = 0; a < n; ++a) {
            ev.top_ids.push_back(static_cast<int32_t>((tokens[p] + a) % opt.vocab_size));
            ev.top_logprobs.push_back(ev.logprobs[p] - 0.5f * static_cast<float>(a));
          }
      }
    }
    ev.tokens = std::move(tokens);
    j.stream->push(std::move(ev));
    ++j.canvas;
    if (reason != FinishReason::kNone) {
      finish(j, reason, now, reason == FinishReason::kStop ? stop_id : -1);
      return false;
    }
    j.next_time = now + canvas_delay(j, j.canvas) / 1e3 / (j.req.params.previews ? script.preview_steps + 1 : 1);
    return true;
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stop) {
      const double now = now_seconds();
      for (auto it = waiting.begin(); it != waiting.end();) {
        if ((*it)->stream->cancelled()) {
          finish(**it, FinishReason::kAbort, now);
          ++cancelled;
          it = waiting.erase(it);
        } else {
          ++it;
        }
      }
      while (!waiting.empty() && static_cast<int>(running.size()) < opt.max_num_seqs) {
        auto j = std::move(waiting.front());
        waiting.pop_front();
        j->started = now;
        j->next_time = now + script.prefill_delay_ms / 1e3;
        running.push_back(std::move(j));
      }
      double wake = now + 0.005;  // cancellation is a flag: poll it
      for (auto it = running.begin(); it != running.end();) {
        Job& j = **it;
        if (j.stream->cancelled()) {
          finish(j, FinishReason::kAbort, now);
          ++cancelled;
          it = running.erase(it);
          continue;
        }
        if (now >= j.next_time && !advance(j, now)) {
          it = running.erase(it);
          continue;
        }
        wake = std::min(wake, j.next_time);
        ++it;
      }
      const double wait_s = std::max(0.0, wake - now_seconds());
      cv.wait_for(lock, std::chrono::duration<double>(wait_s));
    }
    const double now = now_seconds();
    for (auto& j : waiting) finish(*j, FinishReason::kAbort, now);
    for (auto& j : running) finish(*j, FinishReason::kAbort, now);
    waiting.clear();
    running.clear();
  }
};

ScriptedEngine::ScriptedEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->worker = std::thread([this] { impl_->loop(); });
}

ScriptedEngine::~ScriptedEngine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->worker.joinable()) impl_->worker.join();
}

std::unique_ptr<ScriptedEngine> ScriptedEngine::from_json(const Json& script, ScriptedEngineOptions options) {
  if (!options.encode || !options.decode) fail(ErrorKind::kInternal, "scripted engine: no tokenizer callbacks");
  if (options.max_num_seqs < 1) fail_arg("scripted engine: max_num_seqs must be >= 1");
  auto impl = std::make_unique<Impl>();
  impl->script = parse_script(script, options);
  impl->opt = std::move(options);
  return std::unique_ptr<ScriptedEngine>(new ScriptedEngine(std::move(impl)));
}

std::unique_ptr<ScriptedEngine> ScriptedEngine::from_file(const std::string& path, ScriptedEngineOptions options) {
  const std::string text = read_text_file(path, 16u << 20);
  return from_json(parse_json(text, path, /*is_file=*/true), std::move(options));
}

std::shared_ptr<RequestStream> ScriptedEngine::submit(GenerationRequest request) {
  Impl& im = *impl_;
  if (request.prompt.empty()) fail_arg("the prompt is empty");
  for (int32_t id : request.prompt)
    if (id < 0 || id >= im.opt.vocab_size) fail_arg("Prompt contains invalid tokens: id {}", id);
  if (request.params.max_tokens < 1) fail_arg("max_tokens must be at least 1");
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len >= im.opt.max_model_len || request.params.max_tokens > im.opt.max_model_len - prompt_len)
    fail_arg("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the "
             "messages, {} in the completion).", im.opt.max_model_len, prompt_len + request.params.max_tokens,
             prompt_len, request.params.max_tokens);
  // Replies match the latest user turn (and what follows it: tool results), not the tool
  // declarations or earlier turns of the conversation.
  std::string prompt_text = im.opt.decode(request.prompt);
  if (const size_t turn = prompt_text.rfind("<|turn>user"); turn != std::string::npos)
    prompt_text.erase(0, turn);
  auto job = std::make_unique<Job>();
  {
    std::lock_guard<std::mutex> lock(im.mu);
    if (static_cast<int>(im.waiting.size()) >= im.opt.max_queue)
      throw Error(ErrorKind::kResourceExhausted,
                  fmt::format("The server is overloaded: {} requests are already waiting (--max-queue). Retry later.",
                              im.waiting.size()));
    job->stream = std::make_shared<RequestStream>(im.next_id++);
    job->seed = request.params.seed ? *request.params.seed : rng::splitmix64(0x5eed ^ ++im.unseeded ^
                                                                        static_cast<uint64_t>(now_seconds() * 1e9));
    job->req = std::move(request);
    job->submitted = now_seconds();
    for (const auto& r : im.script.replies) {
      const bool match = std::all_of(r.when.begin(), r.when.end(),
                                     [&](const std::string& w) { return prompt_text.find(w) != std::string::npos; });
      if (match) {
        job->reply = &r;
        break;
      }
    }
    if (!job->reply) job->reply = &im.script.fallback;
    auto stream = job->stream;
    im.waiting.push_back(std::move(job));
    im.cv.notify_all();
    return stream;
  }
}

EngineStats ScriptedEngine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  EngineStats s;
  s.running = static_cast<int64_t>(impl_->running.size());
  s.waiting = static_cast<int64_t>(impl_->waiting.size());
  s.max_num_seqs = impl_->opt.max_num_seqs;
  s.max_queue = impl_->opt.max_queue;
  s.kv_usage = static_cast<double>(s.running) / std::max(1, impl_->opt.max_num_seqs);
  s.requests_cancelled = impl_->cancelled;
  s.engine_steps = impl_->steps;
  s.canvas_length = impl_->script.canvas_length;
  return s;
}

int64_t ScriptedEngine::max_model_len() const { return impl_->opt.max_model_len; }
int ScriptedEngine::vocab_size() const { return impl_->opt.vocab_size; }

}  // namespace dgemma
