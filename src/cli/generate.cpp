// dgemma generate MODEL: one-shot generation on the CPU or CUDA backend, with per-canvas statistics
// and optional dumps of every named intermediate (.npy) for comparison with the reference.
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/generate_chat.h"
#include "engine/batch_runner.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/log.h"
#include "util/npy.h"
#include "util/timing.h"

namespace dgemma::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string prompt_ids, canvas_ids, prompt_text, dump_dir;
  std::string load_format = "auto", device = "auto";
  int64_t max_tokens = 256;
  uint64_t seed = 0;
  std::optional<int> max_steps, stability, canvas_length;
  std::optional<double> entropy_bound, t_min, t_max, confidence;
  bool ignore_eos = false, thinking = false, raw = false, chat = false;
  int batch = 1;  // run this many copies (seeds seed..seed+batch-1) together, to measure batched steps
};

std::vector<int32_t> parse_ids(const std::string& s, const char* flag) {
  std::vector<int32_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t pos = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos == 0 || item.find_first_not_of(" \t", pos) != std::string::npos || v < 0 || v > INT32_MAX)
      fail_arg("{}: '{}' is not a token id", flag, item);
    out.push_back(static_cast<int32_t>(v));
  }
  if (out.empty()) fail_arg("{}: no token ids given", flag);
  return out;
}

void dump_tensor(Backend& be, const std::string& path, const Tensor& t) {
  std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.ndim);
  if (t.type == ScalarType::kBF16) {
    std::vector<uint16_t> raw(static_cast<size_t>(t.numel()));
    be.to_host(t, raw.data());
    std::vector<float> f(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) f[i] = bf16_to_f32(raw[i]);
    write_npy(path, "f4", shape, f.data(), f.size() * 4);
  } else {
    std::vector<uint8_t> raw(t.nbytes());
    be.to_host(t, raw.data());
    write_npy(path, t.type == ScalarType::kF32 ? "f4" : t.type == ScalarType::kI32 ? "i4" : "u1", shape, raw.data(), raw.size());
  }
}

int run_generate(const GenerateOptions& o) {
  if (o.chat) return run_generate_chat({o.model, o.load_format, o.device, o.max_tokens, o.seed, o.thinking, o.max_steps, o.entropy_bound});
  ModelConfig mc = load_model_config(o.model);
  if (o.canvas_length) {
    mc.canvas_length = *o.canvas_length;
    validate_model_config(mc, "--canvas-length");
  }
  const GenerationConfig gen = load_generation_config(o.model, mc);
  std::unique_ptr<Tokenizer> tok;
  const std::string tok_path = (std::filesystem::path(o.model) / "tokenizer.json").string();
  if (std::filesystem::exists(tok_path)) tok = Tokenizer::from_file(tok_path);

  std::vector<int32_t> prompt;
  if (!o.prompt_ids.empty()) {
    prompt = parse_ids(o.prompt_ids, "--prompt-ids");
  } else if (!o.prompt_text.empty()) {
    if (!tok) fail_arg("-p needs {} (or use --prompt-ids)", tok_path);
    std::string text = o.prompt_text;
    if (!o.raw) {
      ChatTemplate tmpl(ChatTemplateKind::kDiffusionGemma2026_07);
      ChatTemplateOptions opts;
      opts.extra_kwargs = Json{{"enable_thinking", o.thinking}};
      text = tmpl.render(Json::array({Json{{"role", "user"}, {"content", o.prompt_text}}}), Json::array(), opts);
    }
    prompt = tok->encode(text, /*allow_special=*/!o.raw);
  } else {
    fail_arg("give a prompt: --prompt-ids 2,105,... or -p TEXT");
  }

  std::string device = o.device == "auto" ? (cuda_available() ? "cuda" : "cpu") : o.device;
  std::unique_ptr<Backend> be = device == "cuda" ? make_cuda_backend(0) : device == "cpu" ? make_cpu_backend() : nullptr;
  if (!be) fail_arg("--device must be auto, cpu or cuda");
  ModelWeights w = o.load_format == "dummy" ? dummy_weights(mc, *be, o.seed) : load_weights(mc, o.model, *be);
  DiffusionGemma model(mc, std::move(w), *be);

  SequenceParams p;
  p.diffusion = resolve_diffusion_params(gen, o.max_steps, o.entropy_bound, o.t_min, o.t_max, o.stability, o.confidence);
  p.seed = o.seed;
  p.max_tokens = o.max_tokens;
  if (p.max_tokens < 1) fail_arg("--max-tokens must be at least 1");
  p.ignore_eos = o.ignore_eos;
  p.eos_ids = gen.eos_token_ids;
  for (int32_t id : prompt)
    if (id < 0 || id >= mc.text.vocab_size) fail_arg("--prompt-ids: token id {} is outside the vocabulary", id);
  if (!o.canvas_ids.empty()) {
    p.initial_canvas = parse_ids(o.canvas_ids, "--canvas-ids");
    if (static_cast<int>(p.initial_canvas.size()) != mc.canvas_length)
      fail_arg("--canvas-ids needs exactly {} ids (canvas_length)", mc.canvas_length);
    for (int32_t id : p.initial_canvas)
      if (id >= mc.text.vocab_size) fail_arg("--canvas-ids: token id {} is outside the vocabulary", id);
  }

  const int64_t C = mc.canvas_length;
  const int64_t max_len = static_cast<int64_t>(prompt.size()) + (p.max_tokens / C + 2) * C;
  const int64_t chunk = std::max<int64_t>(C, std::min<int64_t>(2048, static_cast<int64_t>(prompt.size())));
  if (o.batch < 1 || o.batch > 64) fail_arg("--batch must be in [1, 64]");
  std::vector<SequenceKv> kvs;
  std::vector<std::unique_ptr<Sequence>> owned;
  std::vector<Sequence*> seqs;
  for (int b = 0; b < o.batch; ++b) kvs.push_back(allocate_kv(mc, *be, max_len, chunk));
  for (int b = 0; b < o.batch; ++b) {
    SequenceParams pb = p;
    pb.seed = p.seed + static_cast<uint64_t>(b);
    owned.push_back(std::make_unique<Sequence>(b + 1, prompt, pb));
    Sequence& s = *owned.back();
    s.kv = &kvs[b];
    s.logits = be->alloc(ScalarType::kBF16, {C, mc.text.vocab_size});
    s.soft_embeds = be->alloc(ScalarType::kBF16, {C, mc.text.hidden_size});
    seqs.push_back(&s);
  }
  Sequence& seq = *owned.front();
  // The prompt is prefilled in its own pass (measured, and clean for --dump); later commits are
  // fused with the next canvas's first denoising step.
  BatchRunner runner(model, static_cast<int64_t>(o.batch) * chunk, chunk);
  for (auto* s : seqs) runner.start(*s);

  std::vector<SequenceEvent> events;
  int pass = 0;
  double prefill_ms = 0, denoise_ms = 0;
  int64_t denoise_passes = 0;
  Stopwatch total;
  auto all_done = [&] {
    for (auto* s : seqs)
      if (s->state != Sequence::State::kFinished) return false;
    return true;
  };
  while (!all_done()) {
    if (!o.dump_dir.empty() && pass < 2) {
      std::filesystem::create_directories(o.dump_dir);
      const std::string prefix = pass == 0 ? "prefill." : "denoise0.";
      model.set_dump_hook([&](const std::string& name, const Tensor& t) {
        dump_tensor(*be, (std::filesystem::path(o.dump_dir) / (prefix + name + ".npy")).string(), t);
      });
    } else {
      model.set_dump_hook(nullptr);
    }
    std::vector<Sequence*> live;
    for (auto* s : seqs)
      if (s->state != Sequence::State::kFinished) live.push_back(s);
    StepStats st = runner.step(live, events);
    if (st.denoise_items == 0) {
      prefill_ms += st.forward_ms;
    } else {
      denoise_ms += st.forward_ms + st.sampler_ms;
      ++denoise_passes;
    }
    ++pass;
    for (auto& ev : events) {
      if (ev.kind != SequenceEvent::Kind::kCanvas || ev.seq != &seq) continue;
      std::fprintf(stderr, "canvas %zu: %d steps, %zu tokens, %.2f tokens/step, %.1f ms/step\n", seq.canvases.size() - 1,
                   ev.steps, ev.tokens.size(), ev.steps ? static_cast<double>(ev.tokens.size()) / ev.steps : 0.0,
                   ev.steps ? ev.denoise_ms / ev.steps : 0.0);
    }
    events.clear();
  }
  std::fprintf(stderr, "prefill: %zu tokens x %d in %.1f ms (%.0f tokens/s)\n", prompt.size(), o.batch, prefill_ms,
               prefill_ms > 0 ? 1e3 * static_cast<double>(prompt.size() * o.batch) / prefill_ms : 0.0);
  std::fprintf(stderr, "denoise: %lld batched steps of %d sequence(s), %.2f ms per step\n",
               static_cast<long long>(denoise_passes), o.batch, denoise_passes ? denoise_ms / denoise_passes : 0.0);
  std::fprintf(stderr, "done: %zu tokens in %.1f ms (%zu canvases), finish_reason=%s, prompt %zu tokens, %s backend\n",
               seq.output.size(), total.ms(), seq.canvases.size(), finish_reason_name(seq.finish), prompt.size(),
               be->name().c_str());
  std::string ids;
  for (size_t i = 0; i < seq.output.size(); ++i) ids += (i ? " " : "") + std::to_string(seq.output[i]);
  std::printf("%s\n", ids.c_str());
  if (tok && !o.prompt_text.empty()) std::printf("%s\n", tok->decode(seq.output, /*skip_special=*/false).c_str());
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, CommandList& out) {
  auto o = std::make_shared<GenerateOptions>();
  auto* sub = app.add_subcommand("generate", "One-shot generation: prompt ids (or text) in, committed tokens out");
  sub->add_option("MODEL", o->model, "Hugging Face model directory (config.json, generation_config.json, *.safetensors)")->required();
  sub->add_option("--prompt-ids", o->prompt_ids, "comma-separated prompt token ids");
  sub->add_option("-p,--prompt", o->prompt_text, "prompt text (rendered with the chat template as one user turn; needs tokenizer.json)");
  sub->add_flag("--chat", o->chat, "interactive chat on stdin: the canvas settles in place on a terminal, statistics per canvas");
  sub->add_flag("--raw", o->raw, "with -p: tokenize the text as is, no chat template");
  sub->add_flag("--enable-thinking", o->thinking, "with -p: render the prompt with enable_thinking=true");
  sub->add_option("--canvas-ids", o->canvas_ids, "comma-separated initial canvas (canvas_length ids) for the first canvas");
  sub->add_option("--seed", o->seed, "seed of the counter-based RNG (default 0)");
  sub->add_option("--max-tokens", o->max_tokens, "maximum tokens to return (default 256)");
  sub->add_option("--max-denoising-steps", o->max_steps, "denoising step cap per canvas");
  sub->add_option("--entropy-bound", o->entropy_bound, "entropy bound of the sampler");
  sub->add_option("--t-min", o->t_min, "final temperature of the schedule");
  sub->add_option("--t-max", o->t_max, "initial temperature of the schedule");
  sub->add_option("--stability-threshold", o->stability, "steps the argmax canvas must stay unchanged to stop");
  sub->add_option("--confidence-threshold", o->confidence, "mean entropy below which a canvas may stop");
  sub->add_option("--canvas-length", o->canvas_length, "override the config's canvas_length");
  sub->add_flag("--ignore-eos", o->ignore_eos, "do not stop at EOS ids");
  sub->add_option("--load-format", o->load_format, "auto | safetensors | dummy")->check(CLI::IsMember({"auto", "safetensors", "dummy"}));
  sub->add_option("--device", o->device, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  sub->add_option("--batch", o->batch, "run N copies (seeds seed..seed+N-1) in one batch and report batched step times");
  sub->add_option("--dump", o->dump_dir, "write every named intermediate of the prefill and the first denoising pass as .npy");
  out.push_back({sub, [o] { return run_generate(*o); }});
}

}  // namespace dgemma::cli
