#include "support/scripted_runner.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "engine/limits.h"
#include "engine/pins.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {
namespace {

using Segment = ScriptedRunner::Segment;
using Reply = ScriptedRunner::Reply;
using Script = ScriptedRunner::Script;

const char* kDefaultFiller[] = {" alpha", " beta",  " gamma",  " delta", " river", " stone",
                                " light", " cloud", " seven",  " green", " quiet", " table",
                                " north", " paper", " bridge", " maple"};

void check_keys(const Json& j, std::initializer_list<const char*> known, const std::string& where) {
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::none_of(known.begin(), known.end(), [&](const char* k) { return it.key() == k; }))
      fail_file("{}: unknown key \"{}\"", where, it.key());
}

Segment parse_segment(const Json& c, const ScriptedRunnerOptions& opt, const std::string& where) {
  Segment out;
  if (c.is_string()) {
    out.tokens = opt.tokenizer.encode(c.get<std::string>());
    return out;
  }
  if (!c.is_object()) fail_file("{}: a canvas must be a string or an object", where);
  check_keys(c, {"text", "tokens", "error", "delay_ms", "steps"}, where);
  if (c.contains("error")) {
    if (!c["error"].is_string() || c["error"].get<std::string>().empty())
      fail_file("{}.error must be a non-empty string", where);
    out.error = c["error"].get<std::string>();
  } else if (c.contains("text")) {
    if (!c["text"].is_string()) fail_file("{}.text must be a string", where);
    out.tokens = opt.tokenizer.encode(c["text"].get<std::string>());
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
    if (!c["delay_ms"].is_number() || c["delay_ms"].get<double>() < 0 || c["delay_ms"].get<double>() > 600000)
      fail_file("{}.delay_ms must be in [0, 600000]", where);
    out.delay_ms = c["delay_ms"].get<double>();
  }
  if (c.contains("steps")) {
    if (!c["steps"].is_number_integer() || c["steps"].get<int64_t>() < 1 ||
        c["steps"].get<int64_t>() > limits::kMaxDenoisingSteps)
      fail_file("{}.steps must be an integer in [1, {}]", where, limits::kMaxDenoisingSteps);
    out.steps = c["steps"].get<int>();
  }
  return out;
}

Reply parse_reply(const Json& r, const ScriptedRunnerOptions& opt, const std::string& where) {
  if (!r.is_object()) fail_file("{} must be an object", where);
  check_keys(r, {"when", "canvases", "random_canvases"}, where);
  Reply out;
  if (r.contains("when")) {
    const Json& w = r["when"];
    if (w.is_string()) {
      out.when.push_back(w.get<std::string>());
    } else if (w.is_array()) {
      for (const auto& s : w) {
        if (!s.is_string()) fail_file("{}.when entries must be strings", where);
        out.when.push_back(s.get<std::string>());
      }
    } else {
      fail_file("{}.when must be a string or an array of strings", where);
    }
  }
  if (r.contains("canvases")) {
    if (!r["canvases"].is_array()) fail_file("{}.canvases must be an array", where);
    for (size_t i = 0; i < r["canvases"].size(); ++i)
      out.segments.push_back(parse_segment(r["canvases"][i], opt, fmt::format("{}.canvases[{}]", where, i)));
  }
  if (r.contains("random_canvases")) {
    if (!r["random_canvases"].is_number_integer() || r["random_canvases"].get<int64_t>() < 1 ||
        r["random_canvases"].get<int64_t>() > 4096)
      fail_file("{}.random_canvases must be an integer in [1, 4096]", where);
    out.random_canvases = r["random_canvases"].get<int>();
  }
  if (out.segments.empty() && out.random_canvases == 0)
    fail_file("{} needs \"canvases\" or \"random_canvases\"", where);
  if (!out.segments.empty() && out.random_canvases > 0)
    fail_file("{}: \"canvases\" and \"random_canvases\" are exclusive", where);
  return out;
}

Script parse_script(const Json& j, const ScriptedRunnerOptions& opt) {
  if (!j.is_object()) fail_file("scripted runner: the script must be a JSON object");
  check_keys(
      j, {"canvas_length", "steps", "canvas_delay_ms", "prefill_delay_ms", "filler", "replies", "default"},
      "scripted runner");
  Script s;
  auto get_num = [&](const char* key, double lo, double hi, double def) {
    if (!j.contains(key)) return def;
    if (!j[key].is_number() || j[key].get<double>() < lo || j[key].get<double>() > hi)
      fail_file("scripted runner: \"{}\" must be a number in [{}, {}]", key, lo, hi);
    return j[key].get<double>();
  };
  s.steps = static_cast<int>(get_num("steps", 1, limits::kMaxDenoisingSteps, 8));
  s.canvas_delay_ms = get_num("canvas_delay_ms", 0, 600000, 20);
  s.prefill_delay_ms = get_num("prefill_delay_ms", 0, 600000, 0);
  std::vector<std::string> words;
  if (j.contains("filler")) {
    if (!j["filler"].is_array() || j["filler"].empty())
      fail_file("scripted runner: \"filler\" must be a non-empty array");
    for (const auto& w : j["filler"]) {
      if (!w.is_string()) fail_file("scripted runner: \"filler\" entries must be strings");
      words.push_back(w.get<std::string>());
    }
  } else {
    words.assign(std::begin(kDefaultFiller), std::end(kDefaultFiller));
  }
  for (const auto& w : words)
    for (int32_t id : opt.tokenizer.encode(w))
      if (std::find(opt.eos_ids.begin(), opt.eos_ids.end(), id) == opt.eos_ids.end()) s.filler.push_back(id);
  if (s.filler.empty()) fail_file("scripted runner: the filler words produced no tokens");
  if (j.contains("replies")) {
    if (!j["replies"].is_array()) fail_file("scripted runner: \"replies\" must be an array");
    for (size_t i = 0; i < j["replies"].size(); ++i)
      s.replies.push_back(parse_reply(j["replies"][i], opt, fmt::format("replies[{}]", i)));
  }
  s.fallback.random_canvases = 1;
  if (j.contains("default")) s.fallback = parse_reply(j["default"], opt, "default");
  return s;
}

}  // namespace

std::optional<int> ScriptedRunner::canvas_length_of(const Json& script) {
  if (!script.is_object() || !script.contains("canvas_length")) return std::nullopt;
  const Json& c = script["canvas_length"];
  if (!c.is_number_integer() || c.get<int64_t>() < 1 || c.get<int64_t>() > limits::kMaxCanvasLength)
    fail_file("scripted runner: \"canvas_length\" must be an integer in [1, {}]", limits::kMaxCanvasLength);
  return c.get<int>();
}

std::unique_ptr<ScriptedRunner> ScriptedRunner::from_json(const Json& script, ScriptedRunnerOptions options) {
  if (!options.tokenizer.encode || !options.tokenizer.decode)
    fail(ErrorKind::kInternal, "scripted runner: no tokenizer callbacks");
  DG_CHECK(options.canvas_length > 0 && options.vocab_size > 0);
  Script s = parse_script(script, options);
  return std::unique_ptr<ScriptedRunner>(new ScriptedRunner(std::move(s), std::move(options)));
}

int32_t ScriptedRunner::filler(uint64_t seed, uint64_t canvas, uint64_t pos) const {
  return script_
      .filler[rng::splitmix64(seed ^ rng::splitmix64(canvas * 1000003ULL + pos)) % script_.filler.size()];
}

ScriptedRunner::SeqState& ScriptedRunner::state_of(const Sequence& seq) {
  if (auto it = state_.find(seq.id()); it != state_.end()) return it->second;
  // Replies match the latest user turn (and what follows it: tool results), not the tool
  // declarations or earlier turns of the conversation.
  const auto& h = seq.history();
  std::string prompt = opt_.tokenizer.decode(std::vector<int32_t>(h.begin(), h.begin() + seq.prompt_len()));
  if (const size_t turn = prompt.rfind("<|turn>user"); turn != std::string::npos) prompt.erase(0, turn);
  const Reply* reply = &script_.fallback;
  for (const auto& r : script_.replies)
    if (std::all_of(r.when.begin(), r.when.end(),
                    [&](const std::string& w) { return prompt.find(w) != std::string::npos; })) {
      reply = &r;
      break;
    }
  SeqState st;
  const int64_t C = opt_.canvas_length;
  if (reply->random_canvases > 0) {
    for (int64_t a = 0; a < reply->random_canvases * C; ++a)
      st.stream.push_back(
          filler(seq.params().seed, static_cast<uint64_t>(a / C), static_cast<uint64_t>(a % C)));
  }
  auto at = [&](size_t k) -> CanvasScript& {
    if (st.canvases.size() <= k) st.canvases.resize(k + 1, CanvasScript{-1, -1, {}});
    return st.canvases[k];
  };
  const size_t cl = static_cast<size_t>(C);
  for (const Segment& s : reply->segments) {
    const size_t pos = st.stream.size();
    if (!s.error.empty()) {
      CanvasScript& c = at(pos / cl);
      c.error = s.error;
      if (s.delay_ms >= 0) c.delay_ms = s.delay_ms;
      if (s.steps > 0) c.steps = s.steps;
      break;  // nothing after an error is reached
    }
    // A canvas takes the delay and steps of the segment its first position belongs to.
    for (size_t k = (pos + cl - 1) / cl; k * cl < pos + s.tokens.size(); ++k) {
      at(k).delay_ms = s.delay_ms;
      at(k).steps = s.steps;
    }
    st.stream.insert(st.stream.end(), s.tokens.begin(), s.tokens.end());
  }
  if (!seq.params().eos_ids.empty()) st.stream.push_back(seq.params().eos_ids.front());
  return state_.emplace(seq.id(), std::move(st)).first->second;
}

ScriptedRunner::CanvasScript ScriptedRunner::canvas_script(const SeqState& st, int k) const {
  CanvasScript c{script_.steps, script_.canvas_delay_ms, {}};
  if (k < static_cast<int>(st.canvases.size())) {
    const CanvasScript& s = st.canvases[static_cast<size_t>(k)];
    if (s.steps > 0) c.steps = s.steps;
    if (s.delay_ms >= 0) c.delay_ms = s.delay_ms;
    c.error = s.error;
  }
  return c;
}

int ScriptedRunner::steps_of(const Sequence& seq, const CanvasScript& c) const {
  // The stop rule needs stability_threshold equal argmax canvases in a row; the step cap ends it anyway.
  const DiffusionParams& d = seq.params().diffusion;
  return std::min(std::max(c.steps, d.stability_threshold), d.max_denoising_steps);
}

int ScriptedRunner::final_positions(const Sequence& seq, int step, int steps) const {
  // The argmax canvas is final from step steps-1-threshold on, so the last `threshold` steps see it
  // unchanged (decide's same_argmax), and grows left to right before.
  const int m = std::max(1, steps - seq.params().diffusion.stability_threshold);
  return opt_.canvas_length * std::min(step + 1, m) / m;
}

std::vector<int32_t> ScriptedRunner::final_canvas(const Sequence& seq, const SeqState& st, int k) const {
  const int C = opt_.canvas_length;
  std::vector<int32_t> out(static_cast<size_t>(C));
  for (int p = 0; p < C; ++p) {
    const size_t a = static_cast<size_t>(k) * static_cast<size_t>(C) + static_cast<size_t>(p);
    out[static_cast<size_t>(p)] =
        a < st.stream.size() ? st.stream[a]
                             : filler(seq.params().seed, static_cast<uint64_t>(k), static_cast<uint64_t>(p));
  }
  return out;
}

StepResult ScriptedRunner::run(const StepPlan& plan) {
  StepResult out;
  double sleep_ms = 0;
  for (const PlannedItem& it : plan.items) {
    const Sequence& seq = *it.seq;
    if (it.kind == PlannedItem::Kind::kEncode) {
      if (it.begin < seq.prompt_len() && it.end >= seq.prompt_len())
        sleep_ms = std::max(sleep_ms, script_.prefill_delay_ms);
      continue;
    }
    SeqState& st = state_of(seq);
    const CanvasScript c = canvas_script(st, seq.canvas_index());
    st.canvas = seq.canvas_index();
    st.step = seq.step();
    st.steps = steps_of(seq, c);
    sleep_ms = std::max(sleep_ms, c.delay_ms / st.steps);
    const SequenceParams& sp = seq.params();
    const int threshold = sp.diffusion.stability_threshold;
    CanvasResult r;
    r.flags.same_argmax = st.step >= st.steps - threshold;
    r.flags.confident = st.step >= st.steps - 1;
    if (!c.error.empty() && st.step >= st.steps - 1) {
      r.error = c.error;
      out.canvases.push_back(std::move(r));
      continue;
    }
    const bool last = seq.last_step(r.flags.same_argmax, r.flags.confident);
    r.argmax = argmax_of(seq, st);
    if (last && sp.logprobs) r.logprobs = logprobs_of(seq, st);
    if (sp.previews) {
      r.accepted = accepted_of(seq, st);
      r.entropy = entropy_of(seq, st);
    }
    if (sp.trace) {
      StepRecord t;
      t.argmax = r.argmax;
      t.canvas_out = r.argmax;
      t.accept = accepted_of(seq, st);
      t.entropy = entropy_of(seq, st);
      t.stop = last;
      r.trace = std::move(t);
    }
    out.canvases.push_back(std::move(r));
  }
  if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(sleep_ms));
  return out;
}

std::vector<int32_t> ScriptedRunner::argmax_of(const Sequence& seq, const SeqState& st) const {
  std::vector<int32_t> canvas = final_canvas(seq, st, st.canvas);
  // Positions not final yet show a draw of filler that changes with the step.
  const int keep = final_positions(seq, st.step, st.steps);
  for (int p = keep; p < opt_.canvas_length; ++p)
    canvas[static_cast<size_t>(p)] = filler(
        seq.params().seed ^ 0x9e3779b97f4a7c15ull,
        static_cast<uint64_t>(st.canvas) * 4099 + static_cast<uint64_t>(st.step), static_cast<uint64_t>(p));
  return canvas;
}

std::vector<uint8_t> ScriptedRunner::accepted_of(const Sequence& seq, const SeqState& st) const {
  std::vector<uint8_t> accepted(static_cast<size_t>(opt_.canvas_length), 0);
  const int keep = final_positions(seq, st.step, st.steps);
  std::fill(accepted.begin(), accepted.begin() + keep, 1);
  const CanvasPins& pins = seq.canvas_pins();
  for (size_t p = 0; p < accepted.size(); ++p)
    if (pins.pinned(static_cast<int>(p))) accepted[p] = 1;  // a pinned position counts as accepted
  return accepted;
}

std::vector<float> ScriptedRunner::entropy_of(const Sequence& seq, const SeqState& st) const {
  // Accepted positions are near-certain, the others are not: enough for the web page's colours.
  const std::vector<uint8_t> accepted = accepted_of(seq, st);
  std::vector<float> e(accepted.size());
  for (size_t p = 0; p < e.size(); ++p) e[p] = accepted[p] ? 0.02f : 2.5f;
  return e;
}

std::vector<float> ScriptedRunner::logprobs_of(const Sequence& seq, const SeqState& st) const {
  // Deterministic values in [-4, 0].
  std::vector<float> lp(static_cast<size_t>(opt_.canvas_length));
  for (size_t p = 0; p < lp.size(); ++p)
    lp[p] = -static_cast<float>(
        (rng::splitmix64(seq.params().seed + static_cast<uint64_t>(st.canvas) * 4099 + p) % 1000) / 250.0);
  return lp;
}

}  // namespace dgemma
