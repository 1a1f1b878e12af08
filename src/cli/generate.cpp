// dgemma generate MODEL: one-shot generation on the CPU or CUDA backend, with per-canvas statistics
// and optional dumps of every named intermediate (.npy) for comparison with the reference.
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "api/openai/image_input.h"
#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/generate_chat.h"
#include "cli/vllm_compat.h"
#include "engine/engine_config.h"
#include "engine/limits.h"
#include "engine/request.h"
#include "image/image_processor.h"
#include "model/config.h"
#include "model/vision_config.h"
#include "text/chat/chat_template.h"
#include "text/tokenizer/tokenizer.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mmap_file.h"
#include "util/npy.h"
#include "util/timing.h"

namespace dgemma::cli {
namespace {

struct GenerateOptions {
  std::string model;
  std::string revision, download_dir;
  std::string prompt_ids, canvas_ids, prompt_text, dump_dir;
  std::string load_format = "auto", device = "auto";
  int64_t max_tokens = 256;
  uint64_t seed = 0;
  std::optional<int> max_steps, stability, canvas_length;
  std::optional<double> entropy_bound, t_min, t_max, confidence;
  bool ignore_eos = false, thinking = false, raw = false, chat = false;
  int batch = 1;  // run this many copies (seeds seed..seed+batch-1) together, to measure batched steps
  int tensor_parallel_size = 1;
  std::vector<std::string> images;  // --image FILE: one per image token id of --prompt-ids, in order
  std::optional<int> max_soft_tokens;
};

// The images of --image, decoded and preprocessed; each image token id of `prompt` becomes its block.
std::vector<PromptImage> prompt_images(const GenerateOptions& o, const ModelConfig& mc,
                                       std::vector<int32_t>& prompt) {
  if (o.images.empty()) return {};
  if (!mc.has_vision) fail_arg("--image: the model has no vision tower (config.json has no vision_config)");
  ImageSupport s;
  s.max_per_prompt = static_cast<int>(o.images.size());
  s.image_token_id = mc.image_token_id;
  s.boi_token_id = mc.boi_token_id;
  s.eoi_token_id = mc.eoi_token_id;
  s.patch_size = mc.vision.patch_size;
  s.pooling_kernel_size = mc.vision.pooling_kernel_size;
  s.max_soft_tokens = o.max_soft_tokens.value_or(load_processor_config(o.model, mc.vision).max_soft_tokens);
  if (!is_supported_soft_tokens(s.max_soft_tokens))
    fail_arg("--max-soft-tokens must be 70, 140, 280, 560 or 1120");
  std::vector<PromptImage> images;
  for (const std::string& file : o.images) {
    const std::string bytes = read_text_file(file);
    try {
      images.push_back(prompt_image(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                                    s, s.max_soft_tokens, ImageInputPolicy{}));
    } catch (const Error& e) {
      fail_arg("--image {}: {}", file, e.what());
    }
  }
  expand_image_placeholders(prompt, images, s);
  return images;
}

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

// `t` is a host copy (the engine's runner copies each intermediate before calling the hook).
void dump_tensor(const std::string& path, const Tensor& t) {
  std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.ndim);
  if (t.type == ScalarType::kBF16) {
    const uint16_t* raw = t.ptr<uint16_t>();
    std::vector<float> f(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_f32(raw[i]);
    write_npy(path, "f4", shape, f.data(), f.size() * 4);
  } else {
    write_npy(path, t.type == ScalarType::kF32 ? "f4" : t.type == ScalarType::kI32 ? "i4" : "u1", shape, t.data, t.nbytes());
  }
}

int run_generate(GenerateOptions o) {
  o.model = resolve_cli_model(o.model, o.revision, o.download_dir);
  if (o.chat) return run_generate_chat({o.model, o.load_format, o.device, o.max_tokens, o.seed, o.thinking, o.max_steps, o.entropy_bound});
  ModelConfig mc = load_model_config(o.model);
  if (o.canvas_length) {
    if (*o.canvas_length < 1 || *o.canvas_length > limits::kMaxCanvasLength)
      fail_arg("--canvas-length must be in [1, {}]", limits::kMaxCanvasLength);
    mc.canvas_length = *o.canvas_length;
    validate_model_config(mc, "--canvas-length");
  }
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
      const ChatTemplate tmpl = ChatTemplate::from_model_dir(o.model);
      if (!tmpl.present())
        fail_arg("-p renders the prompt with the model's chat template: {} has no chat_template.jinja "
                 "(--raw sends the text as it is)",
                 o.model);
      ChatTemplateOptions opts;
      opts.extra_kwargs = Json{{"enable_thinking", o.thinking}};
      text = tmpl.render(Json::array({Json{{"role", "user"}, {"content", o.prompt_text}}}), Json::array(), opts);
    }
    prompt = tok->encode(text, /*allow_special=*/!o.raw);
  } else {
    fail_arg("give a prompt: --prompt-ids 2,105,... or -p TEXT");
  }
  const std::vector<PromptImage> images = prompt_images(o, mc, prompt);
  if (o.max_tokens < 1) fail_arg("--max-tokens must be at least 1");
  if (o.batch < 1 || o.batch > 64) fail_arg("--batch must be in [1, 64]");

  // The one composition root: the same engine `dgemma serve` runs.
  EngineConfig ec;
  ec.model_dir = o.model;
  ec.load_format = o.load_format;
  ec.device = o.device;
  ec.seed = o.seed;
  ec.canvas_length = o.canvas_length;
  ec.max_num_seqs = o.batch;
  ec.tensor_parallel_size = o.tensor_parallel_size;
  const int64_t C = mc.canvas_length;
  const int64_t plen = static_cast<int64_t>(prompt.size());
  ec.max_model_len = std::min<int64_t>(mc.text.max_position_embeddings, plen + (o.max_tokens / C + 2) * C);
  // The prompt is prefilled in its own pass (so --dump sees a clean prefill pass, then the first
  // denoising pass); later commits are fused with the next canvas's first denoising step.
  ec.max_num_batched_tokens =
      std::max<int64_t>(C, std::min<int64_t>(limits::kMaxPrefillChunk, plen) * o.batch);
  if (!o.dump_dir.empty()) {
    std::filesystem::create_directories(o.dump_dir);
    ec.step_dump = [dir = o.dump_dir](int64_t step) -> EngineConfig::DumpHookFn {
      if (step > 1) return nullptr;
      const std::string prefix = step == 0 ? "prefill." : "denoise0.";
      return [dir, prefix](const std::string& name, const Tensor& t) {
        dump_tensor((std::filesystem::path(dir) / (prefix + name + ".npy")).string(), t);
      };
    };
  }
  std::unique_ptr<EngineInterface> engine = create_model_engine(ec);

  std::vector<std::shared_ptr<RequestStream>> streams;
  auto waker = std::make_shared<StreamWaker>();
  for (int b = 0; b < o.batch; ++b) {
    GenerationRequest r;
    r.prompt = prompt;
    r.images = images;
    SamplingParams& sp = r.params;
    sp.max_tokens = o.max_tokens;
    sp.seed = o.seed + static_cast<uint64_t>(b);
    sp.max_denoising_steps = o.max_steps;
    sp.entropy_bound = o.entropy_bound;
    sp.t_min = o.t_min;
    sp.t_max = o.t_max;
    sp.stability_threshold = o.stability;
    sp.confidence_threshold = o.confidence;
    sp.ignore_eos = o.ignore_eos;
    if (!o.canvas_ids.empty()) sp.canvas_ids = parse_ids(o.canvas_ids, "--canvas-ids");
    auto stream = engine->submit(std::move(r));
    stream->set_waker(waker);
    streams.push_back(stream);
  }
  // Statistics of the first sequence; the others only add to the batch.
  Stopwatch total;
  std::vector<int32_t> output;
  int canvases = 0;
  RequestEvent done;
  std::vector<bool> finished(streams.size(), false);
  size_t open = streams.size();
  uint64_t seen = waker->seq();
  while (open > 0) {
    for (size_t b = 0; b < streams.size(); ++b) {
      RequestEvent ev;
      while (!finished[b] && streams[b]->try_pop(ev)) {
        if (ev.kind == RequestEvent::Kind::kError) throw Error(ErrorKind::kInternal, ev.message);
        if (ev.kind == RequestEvent::Kind::kFinished) {
          finished[b] = true;
          --open;
          if (b == 0) done = ev;
        } else if (ev.kind == RequestEvent::Kind::kCanvas && b == 0) {
          std::fprintf(stderr, "canvas %d: %d steps, %zu tokens, %.2f tokens/step, %.1f ms/step\n", canvases, ev.steps,
                       ev.tokens.size(), ev.steps ? static_cast<double>(ev.tokens.size()) / ev.steps : 0.0,
                       ev.steps ? ev.denoise_ms / ev.steps : 0.0);
          output.insert(output.end(), ev.tokens.begin(), ev.tokens.end());
          ++canvases;
        }
      }
    }
    if (open > 0) seen = waker->wait(seen, std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "prefill: %zu tokens x %d in %.1f ms (%.0f tokens/s)\n", prompt.size(), o.batch, done.prefill_ms,
               done.prefill_ms > 0 ? 1e3 * static_cast<double>(prompt.size() * o.batch) / done.prefill_ms : 0.0);
  std::fprintf(stderr, "denoise: %d steps of %d sequence(s) in %.1f ms, %.2f ms per step\n", done.steps, o.batch,
               done.decode_ms, done.steps ? done.decode_ms / done.steps : 0.0);
  std::fprintf(stderr, "done: %zu tokens in %.1f ms (%d canvases), finish_reason=%s, prompt %zu tokens\n", output.size(),
               total.ms(), canvases, finish_reason_name(done.reason), prompt.size());
  std::string ids;
  for (size_t i = 0; i < output.size(); ++i) ids += (i ? " " : "") + std::to_string(output[i]);
  std::printf("%s\n", ids.c_str());
  if (tok && !o.prompt_text.empty()) std::printf("%s\n", tok->decode(output, /*skip_special=*/false).c_str());
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, CommandList& out) {
  auto o = std::make_shared<GenerateOptions>();
  auto* sub = app.add_subcommand("generate", "One-shot generation: prompt ids (or text) in, committed tokens out");
  sub->add_option(
         "MODEL", o->model,
         "A model directory (config.json, generation_config.json, *.safetensors) or a Hugging Face repo id "
         "(org/name) in the local cache, as dgemma serve takes it")
      ->required();
  sub->add_option("--revision", o->revision,
                  "Branch, tag or commit of a repo id in the cache (default main)");
  sub->add_option("--download-dir", o->download_dir,
                  "A Hugging Face cache directory searched before the default ones");
  sub->add_option("--prompt-ids", o->prompt_ids, "comma-separated prompt token ids");
  sub->add_option("-p,--prompt", o->prompt_text, "prompt text (rendered with the chat template as one user turn; needs tokenizer.json)");
  sub->add_flag("--chat", o->chat, "interactive chat on stdin: the canvas settles in place on a terminal, statistics per canvas");
  sub->add_flag("--raw", o->raw, "with -p: tokenize the text as is, no chat template");
  sub->add_flag("--enable-thinking", o->thinking, "with -p: render the prompt with enable_thinking=true");
  sub->add_option(
      "--image", o->images,
      "an image file (PNG, JPEG, WebP, GIF; repeatable): each image token id of --prompt-ids stands for "
      "one image, in order, and becomes its <|image> ... <image|> block");
  sub->add_option(
      "--max-soft-tokens", o->max_soft_tokens,
      "soft tokens an image may have: 70, 140, 280, 560 or 1120 (default: processor_config.json's)");
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
  sub->add_option("--tensor-parallel-size", o->tensor_parallel_size,
                  "split the model over N ranks (1, 2, 4 or 8; CPU backend: one thread per rank)");
  sub->add_option("--batch", o->batch, "run N copies (seeds seed..seed+N-1) in one batch and report batched step times");
  sub->add_option("--dump", o->dump_dir, "write every named intermediate of the prefill and the first denoising pass as .npy");
  out.push_back({sub, [o] { return run_generate(*o); }});
}

}  // namespace dgemma::cli
