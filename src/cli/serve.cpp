// dgemma serve MODEL [flags]: the OpenAI-compatible server. Flags follow `vllm serve` (docs/API.md)
// so launch scripts carry over; vLLM knobs that mean nothing here are accepted and logged.
#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "api/api_server.h"
#include "api/http/http_server.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/serve_flags.h"
#include "cli/stats_log.h"
#include "cli/vllm_compat.h"
#include "engine/engine_config.h"
#include "engine/limits.h"
#include "model/config.h"
#include "text/chat/chat_template.h"
#include "text/chat/prompt_builder.h"
#include "text/tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/json.h"
#include "util/log.h"
#include "util/mmap_file.h"

namespace dgemma::cli {
namespace {

struct Prepared {
  std::string model_dir;      // resolved MODEL (a local directory or a cache snapshot)
  std::string tokenizer_dir;  // --tokenizer, else model_dir
  EngineConfig engine;
  ApiServerOptions api;
  HttpServerOptions http;
  std::optional<std::string> extra_format;  // --load-format <ServeLoadFormat's prefix><argument>: the argument
  const ServeLoadFormat* extra = nullptr;   // the ServeLoadFormat it names
};

Prepared prepare(ServeFlags& f, const std::vector<ServeLoadFormat>& extras) {
  set_log_level(parse_log_level(f.log_level));
  Prepared p;
  EngineConfig& e = p.engine;
  if (!f.model_option.empty()) {
    if (!f.model.empty() && f.model != f.model_option)
      fail_arg("MODEL '{}' and --model '{}' disagree; give one of them", f.model, f.model_option);
    f.model = f.model_option;
  }
  if (f.model.empty()) fail_arg("serve: no model given (dgemma serve MODEL, or --model MODEL)");
  ModelSourceOptions so;
  so.revision = f.revision;
  so.download_dir = f.download_dir;
  so.cache_dirs = default_cache_dirs();
  const ResolvedModel rm = resolve_model(f.model, so);
  if (!rm.repo_id.empty()) DG_LOG_INFO("serve", "{}: Hugging Face cache snapshot {} ({})", rm.repo_id, rm.revision, rm.dir);
  p.model_dir = rm.dir;
  p.tokenizer_dir = rm.dir;
  if (!f.tokenizer.empty()) {
    ModelSourceOptions to = so;
    to.revision.clear();
    p.tokenizer_dir = resolve_model(f.tokenizer, to).dir;
  }
  if (!std::filesystem::is_regular_file(std::filesystem::path(p.tokenizer_dir) / "tokenizer.json"))
    fail_arg("{} has no tokenizer.json{}", p.tokenizer_dir, f.tokenizer.empty() ? " (--tokenizer names another place)" : "");
  e.model_dir = p.model_dir;
  std::string extra_names;
  for (const ServeLoadFormat& x : extras) {
    extra_names += ", " + x.prefix + "...";
    if (!x.prefix.empty() && !p.extra && f.load_format.rfind(x.prefix, 0) == 0) p.extra = &x;
  }
  if (p.extra) {
    const std::string& prefix = p.extra->prefix;
    p.extra_format = f.load_format.substr(prefix.size());
    if (p.extra_format->empty()) fail_arg("--load-format {}: needs its argument", prefix);
    e.load_format = prefix;
  } else if (f.load_format == "auto" || f.load_format == "safetensors" || f.load_format == "dummy") {
    e.load_format = f.load_format;
  } else if (f.load_format == "fastsafetensors" || f.load_format == "runai_streamer") {
    DG_LOG_INFO("serve", "--load-format {}: loading with dgemma's own safetensors reader", f.load_format);
    e.load_format = "safetensors";
  } else {
    fail_arg("--load-format: '{}' is not one of auto, safetensors, dummy{}", f.load_format, extra_names);
  }
  if (f.dtype == "auto" || f.dtype == "bfloat16" || f.dtype == "bf16") e.dtype = f.dtype == "auto" ? "auto" : "bfloat16";
  else fail_arg("--dtype: '{}' is not supported (auto or bfloat16)", f.dtype);
  if (f.device != "auto" && f.device != "cpu" && f.device != "cuda")
    fail_arg("--device: '{}' is not one of auto, cpu, cuda", f.device);
  e.device = f.device;
  if (!parse_kernel_family(f.kernel_family, &e.cuda.family))
    fail_arg("--kernel-family: '{}' is not one of {}", f.kernel_family, kernel_family_words());
  if (!parse_fp8_experts(f.fp8_moe, &e.cuda.fp8_experts))
    fail_arg("--fp8-moe: '{}' is not one of {}", f.fp8_moe, fp8_experts_words());
  e.quantization = f.quantization;
  // The model's limits are checked here, before the port is bound (the engine repeats them).
  const ModelConfig mc = load_model_config(p.model_dir);
  check_quantization_flag(mc.quant, f.quantization);
  if (!f.max_model_len.empty()) {
    e.max_model_len = parse_token_count(f.max_model_len, "--max-model-len");
    if (e.max_model_len > mc.text.max_position_embeddings)
      fail_arg("--max-model-len {} exceeds the model's max_position_embeddings ({})", e.max_model_len,
               mc.text.max_position_embeddings);
  }
  if (f.max_num_seqs != -1) {
    if (f.max_num_seqs < 1 || f.max_num_seqs > limits::kMaxNumSeqs)
      fail_arg("--max-num-seqs must be in [1, {}] (got {})", limits::kMaxNumSeqs, f.max_num_seqs);
    e.max_num_seqs = f.max_num_seqs;
  }
  if (f.max_num_batched_tokens < 0) fail_arg("--max-num-batched-tokens must be positive");
  e.max_num_batched_tokens = f.max_num_batched_tokens;
  if (f.max_queue < 0 || f.max_queue > limits::kMaxQueue) fail_arg("--max-queue must be between 0 and {}", limits::kMaxQueue);
  e.max_queue = f.max_queue;
  if (!(f.gpu_memory_utilization > 0 && f.gpu_memory_utilization <= 1))
    fail_arg("--gpu-memory-utilization must be in (0, 1], got {}", f.gpu_memory_utilization);
  e.gpu_memory_utilization = f.gpu_memory_utilization;
  if (f.seed < -1) fail_arg("--seed {}: give a non-negative integer, or -1 for a random base seed", f.seed);
  if (f.seed == -1) {
    e.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    DG_LOG_INFO("serve", "--seed -1: requests without a seed get base seed {}", e.seed);
  } else {
    e.seed = static_cast<uint64_t>(f.seed);
  }
  e.enable_chunked_prefill = f.enable_chunked_prefill;
  e.enable_prefix_caching = f.enable_prefix_caching;
  // The warm-up pays the GPU's one-time start-up costs; the CPU backend has none worth a delay.
  e.warmup = !f.no_warmup && resolve_device(f.device) == "cuda";
  e.enforce_eager = f.enforce_eager;
  if (!f.limit_mm_per_prompt.empty()) {
    const Json lm = parse_flag_json(f.limit_mm_per_prompt, "--limit-mm-per-prompt");
    if (!lm.is_object()) fail_arg("--limit-mm-per-prompt must be a JSON object such as '{{\"image\": 4}}'");
    for (auto it = lm.begin(); it != lm.end(); ++it) {
      const bool count = it->is_number_integer() && it->get<int64_t>() >= 0 && it->get<int64_t>() <= 100000;
      if (it.key() == "image") {
        if (!count) fail_arg("--limit-mm-per-prompt: image must be an integer in [0, 100000]");
        e.max_images_per_prompt = it->get<int>();
      } else if (it.key() == "video" || it.key() == "audio") {
        if (!count) fail_arg("--limit-mm-per-prompt: {} must be a non-negative integer", it.key());
        if (it->get<int64_t>() > 0)
          DG_LOG_INFO("serve", "--limit-mm-per-prompt: {} input is not supported (ignored)", it.key());
      } else {
        fail_arg("--limit-mm-per-prompt: unknown modality '{}' (image, video, audio)", it.key());
      }
    }
  }
  e.image_mask = parse_image_mask(f.image_attention, "--image-attention");
  if (!f.kv_cache_memory.empty()) e.kv_cache_memory = parse_byte_count(f.kv_cache_memory, "--kv-cache-memory");

  if (!f.diffusion_config.empty()) {
    const Json dc = parse_flag_json(f.diffusion_config, "--diffusion-config");
    for (auto it = dc.begin(); it != dc.end(); ++it) {
      if (it.key() == "canvas_length") {
        if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > limits::kMaxCanvasLength)
          fail_arg("--diffusion-config: canvas_length must be an integer in [1, {}]", limits::kMaxCanvasLength);
        e.canvas_length = it->get<int>();
      } else if (it.key() == "max_denoising_steps") {
        if (it->is_null()) continue;
        if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > limits::kMaxDenoisingSteps)
          fail_arg("--diffusion-config: max_denoising_steps must be an integer in [1, {}]", limits::kMaxDenoisingSteps);
        e.max_denoising_steps = it->get<int>();
      } else {
        fail_arg("--diffusion-config: unknown key '{}' (accepted: canvas_length, max_denoising_steps)", it.key());
      }
    }
  }
  if (!f.override_generation_config.empty())
    e.override_generation_config = parse_flag_json(f.override_generation_config, "--override-generation-config");
  if (!f.hf_overrides.empty()) {
    e.hf_overrides = parse_flag_json(f.hf_overrides, "--hf-overrides");
    if (auto it = e.hf_overrides.find("diffusion_sampler"); it != e.hf_overrides.end()) {
      if (*it != "entropy_bound")
        fail_arg("--hf-overrides: diffusion_sampler {} is not supported; DiffusionGemma's sampler is \"entropy_bound\"",
                 it->dump());
    }
    if (auto it = e.hf_overrides.find("diffusion_entropy_bound"); it != e.hf_overrides.end()) {
      if (!it->is_number() || !(it->get<double>() > 0))
        fail_arg("--hf-overrides: diffusion_entropy_bound must be a number > 0");
      // Unlike vLLM (where the key is inert), it really sets the bound: it becomes the generation
      // config's sampler_config.entropy_bound unless --override-generation-config sets that itself.
      Json& ogc = e.override_generation_config;
      if (!ogc.contains("sampler_config") || !ogc["sampler_config"].is_object()) ogc["sampler_config"] = Json::object();
      if (!ogc["sampler_config"].contains("entropy_bound")) ogc["sampler_config"]["entropy_bound"] = *it;
    }
  }
  if (f.generation_config != "auto" && f.generation_config != "vllm" &&
      !std::filesystem::is_directory(f.generation_config))
    fail_arg("--generation-config: '{}' is not auto, vllm or a directory", f.generation_config);
  e.generation_config = f.generation_config;

  for (const auto& [flag, value] : {std::pair<std::string, std::string>{"--tool-call-parser", f.tool_call_parser},
                                    {"--reasoning-parser", f.reasoning_parser}})
    if (!value.empty() && value != "gemma4") fail_arg("{}: '{}' is not supported (only gemma4)", flag, value);
  if (f.enable_auto_tool_choice && f.tool_call_parser.empty())
    fail_arg("--enable-auto-tool-choice requires --tool-call-parser gemma4");
  if (f.tensor_parallel_size != 1 && f.tensor_parallel_size != 2 && f.tensor_parallel_size != 4 && f.tensor_parallel_size != 8)
    fail_arg("--tensor-parallel-size must be 1, 2, 4 or 8 (got {})", f.tensor_parallel_size);
  if (f.tensor_parallel_size != 1 && p.extra_format)
    fail_arg("--tensor-parallel-size {}: the {} engine has no model to split", f.tensor_parallel_size,
             p.extra->prefix);
  e.tensor_parallel_size = f.tensor_parallel_size;  // checked against the model's shapes when it loads
  if (!f.attention_backend.empty())
    DG_LOG_INFO("serve", "--attention-backend {}: accepted for vLLM compatibility; dgemma uses its own kernels",
                f.attention_backend);
  if (f.trust_remote_code) DG_LOG_INFO("serve", "--trust-remote-code: accepted; dgemma never runs model code");
  if (f.data_parallel_size < 1 || f.data_parallel_size > 8)
    fail_arg("--data-parallel-size must be 1 to 8 (got {})", f.data_parallel_size);
  if (f.data_parallel_size != 1 && p.extra_format)
    fail_arg("--data-parallel-size {}: the {} engine has no model to replicate", f.data_parallel_size,
             p.extra->prefix);
  e.data_parallel_size = f.data_parallel_size;
  if (f.pipeline_parallel_size != 1)
    fail_arg("--pipeline-parallel-size {}: dgemma runs one model on one device (only 1 is accepted)",
             f.pipeline_parallel_size);
  if (f.kv_cache_dtype != "auto" && f.kv_cache_dtype != "bfloat16" && f.kv_cache_dtype != "bf16")
    fail_arg("--kv-cache-dtype {}: the KV cache is bfloat16 (auto or bfloat16 are accepted)", f.kv_cache_dtype);
  if (f.ssl_keyfile.empty() != f.ssl_certfile.empty())
    fail_arg("TLS needs both --ssl-keyfile and --ssl-certfile");
  // The one tokenizer implementation reads tokenizer.json, which is what auto, hf and slow load.
  if (f.tokenizer_mode != "auto" && f.tokenizer_mode != "hf" && f.tokenizer_mode != "slow")
    fail_arg("--tokenizer-mode {}: dgemma reads the checkpoint's tokenizer.json (auto, hf or slow)",
             f.tokenizer_mode);
  if (f.tokenizer_mode != "auto")
    DG_LOG_INFO("serve", "--tokenizer-mode {}: the checkpoint's tokenizer.json is read either way",
                f.tokenizer_mode);
  if (f.task != "auto" && f.task != "generate")
    fail_arg("--task {}: this server only generates (auto or generate)", f.task);
  if (f.chat_template_content_format != "auto" && f.chat_template_content_format != "string" &&
      f.chat_template_content_format != "openai")
    fail_arg("--chat-template-content-format: '{}' is not one of auto, string, openai",
             f.chat_template_content_format);
  for (const auto& [flag, value] : f.no_effect)
    DG_LOG_INFO("serve", "{}{}: accepted for vLLM compatibility; a tuning knob with no effect in dgemma", flag,
                value.empty() ? "" : " " + value);

  ApiServerOptions& a = p.api;
  a.served_names = f.served_model_name.empty() ? std::vector<std::string>{f.model} : f.served_model_name;
  a.model_path = f.model;
  a.api_keys = f.api_keys;
  // --api-key, else DGEMMA_API_KEY, else vLLM's VLLM_API_KEY (so a migrated deployment stays protected).
  for (const char* var : {"DGEMMA_API_KEY", "VLLM_API_KEY"}) {
    if (!a.api_keys.empty()) break;
    if (const char* v = std::getenv(var); v && *v) {
      a.api_keys.emplace_back(v);
      DG_LOG_INFO("serve", "API key from ${}", var);
    }
  }
  a.access_log = !f.disable_log_requests && !f.disable_uvicorn_access_log;
  a.response_role = f.response_role;
  if (f.response_role.empty() || f.response_role.size() > 64) fail_arg("--response-role must be 1 to 64 characters");
  a.enable_auto_tool_choice = f.enable_auto_tool_choice;
  a.tool_parser = !f.tool_call_parser.empty();
  a.reasoning_parser = !f.reasoning_parser.empty();
  a.strict_params = f.strict_params;
  // auto is openai here: the DiffusionGemma templates read content as a string or a list of parts.
  a.content_as_string = f.chat_template_content_format == "string";
  a.force_include_usage = f.enable_force_include_usage;
  a.return_tokens_as_token_ids = f.return_tokens_as_token_ids;
  a.images = image_input_policy(f);
  if (!f.default_chat_template_kwargs.empty()) {
    a.default_template_kwargs = parse_flag_json(f.default_chat_template_kwargs, "--default-chat-template-kwargs");
    for (auto it = a.default_template_kwargs.begin(); it != a.default_template_kwargs.end(); ++it) {
      if (it->is_object() || it->is_array())
        fail_arg("--default-chat-template-kwargs: '{}' must be a boolean, number or string", it.key());
    }
  }
  if (auto it = e.override_generation_config.find("max_new_tokens"); it != e.override_generation_config.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1)
      fail_arg("--override-generation-config: max_new_tokens must be an integer >= 1");
    a.default_max_tokens = it->get<int64_t>();
  }
  if (!(f.sse_ping_interval >= 0.05 && f.sse_ping_interval <= 3600))
    fail_arg("--sse-ping-interval must be between 0.05 and 3600 seconds");
  a.ping_interval = std::chrono::milliseconds(static_cast<int64_t>(f.sse_ping_interval * 1000));

  HttpServerOptions& h = p.http;
  if (f.port < 0 || f.port > 65535) fail_arg("--port must be between 0 and 65535");
  h.host = f.host;
  h.port = f.port;
  if (f.max_request_bytes < 1024) fail_arg("--max-request-bytes must be at least 1024");
  h.max_body_bytes = static_cast<size_t>(f.max_request_bytes);
  // Every running or queued request pins a worker while it waits (streams for their whole life), so
  // the pool must hold them all plus headroom for /health and /metrics (idle or slow connections hold
  // no worker: the poller keeps them).
  const size_t seqs = static_cast<size_t>(e.max_num_seqs);
  h.max_threads = std::min<size_t>(seqs + static_cast<size_t>(e.max_queue) + 32, 8192);
  h.min_threads = std::min<size_t>(h.max_threads, seqs + 4);
  if (!(f.request_read_timeout >= 1 && f.request_read_timeout <= 3600))
    fail_arg("--request-read-timeout must be between 1 and 3600 seconds");
  h.read_timeout = std::chrono::seconds(static_cast<int64_t>(f.request_read_timeout));
  if (f.max_connections < 16 || f.max_connections > 1000000) fail_arg("--max-connections must be between 16 and 1000000");
  h.max_connections = static_cast<size_t>(f.max_connections);
  if (!(f.shutdown_timeout >= 0 && f.shutdown_timeout <= 86400))
    fail_arg("--shutdown-timeout must be between 0 and 86400 seconds");
  if (!f.root_path.empty()) {
    std::string r = f.root_path;
    while (r.size() > 1 && r.back() == '/') r.pop_back();
    if (r.front() != '/' || r.find_first_of("?#%\\ ") != std::string::npos || r.find("..") != std::string::npos)
      fail_arg("--root-path '{}' must be a path starting with '/' (e.g. /llm)", f.root_path);
    if (r != "/") h.root_path = r;
  }
  auto list_flag = [](const std::string& text, const std::string& flag, std::vector<std::string> dflt) {
    if (text.empty()) return dflt;
    Json j;
    try {
      j = parse_json(text, flag, /*is_file=*/false);
    } catch (const Error& e) {
      fail_arg("{}: expected a JSON list of strings such as [\"*\"]: {}", flag, e.what());
    }
    std::vector<std::string> out;
    if (!j.is_array()) fail_arg("{}: expected a JSON list of strings such as [\"*\"]", flag);
    for (const auto& v : j) {
      if (!v.is_string() || v.get<std::string>().find_first_of("\r\n") != std::string::npos)
        fail_arg("{}: every entry must be a string without line breaks", flag);
      out.push_back(v.get<std::string>());
    }
    return out;
  };
  h.cors.allowed_origins = list_flag(f.allowed_origins, "--allowed-origins", {"*"});
  h.cors.allowed_methods = list_flag(f.allowed_methods, "--allowed-methods", {"*"});
  h.cors.allowed_headers = list_flag(f.allowed_headers, "--allowed-headers", {"*"});
  h.cors.allow_credentials = f.allow_credentials;
  h.access_log = p.api.access_log;
  h.ssl_certfile = f.ssl_certfile;
  h.ssl_keyfile = f.ssl_keyfile;
  return p;
}

// Turns SIGINT/SIGTERM (blocked in every thread since main() began) into calls of on_signal on one
// thread (sigtimedwait): the first signal, and exits the process at once on the second.
class SignalWatcher {
 public:
  SignalWatcher() {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    std::signal(SIGPIPE, SIG_IGN);
  }
  ~SignalWatcher() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }
  void start(std::function<void(int)> on_signal) {
    thread_ = std::thread([this, on_signal = std::move(on_signal)] {
      int seen = 0;
      while (!done_) {
        timespec ts{0, 100 * 1000 * 1000};
        const int sig = sigtimedwait(&set_, nullptr, &ts);
        if (sig <= 0) continue;
        if (++seen > 1) {
          DG_LOG_WARN("serve", "second {}: exiting now", sig == SIGINT ? "SIGINT" : "SIGTERM");
          std::fflush(stderr);
          std::_Exit(128 + sig);
        }
        on_signal(sig);
      }
    });
  }

 private:
  sigset_t set_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// The sampler settings requests get by default, as the engine resolves them (engine_factory.cpp).
void log_sampler_defaults(const EngineConfig& e, const ModelConfig& mc) {
  try {
    GenerationConfig g;
    if (e.generation_config == "vllm") g = default_generation_config(mc);
    else if (e.generation_config == "auto" || e.generation_config.empty()) g = load_generation_config(e.model_dir, mc);
    else g = load_generation_config(e.generation_config, mc);
    if (!e.override_generation_config.empty())
      g = parse_generation_config(e.override_generation_config, "--override-generation-config", g);
    if (e.max_denoising_steps) g.max_denoising_steps = *e.max_denoising_steps;
    // The checkpoint's max_new_tokens is not a default (as in vLLM, it would truncate long answers):
    // only --override-generation-config sets one.
    const auto max_new = e.override_generation_config.find("max_new_tokens");
    const std::string max_tokens =
        max_new != e.override_generation_config.end()
            ? fmt::format("{} (--override-generation-config max_new_tokens)", g.max_new_tokens)
            : std::string("the rest of the context");
    DG_LOG_INFO("serve",
                "sampler defaults (--generation-config {}): max_denoising_steps {}, entropy_bound {}, t_min "
                "{}, t_max {}, "
                "confidence_threshold {}, stability_threshold {}; default max_tokens: {}",
                e.generation_config.empty() ? "auto" : e.generation_config, g.max_denoising_steps,
                g.entropy_bound, g.t_min, g.t_max, g.confidence_threshold, g.stability_threshold, max_tokens);
  } catch (const Error& err) {
    DG_LOG_DEBUG("serve", "sampler defaults not logged: {}", err.what());
  }
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

int run_serve(ServeFlags& f, const std::string& version, const std::vector<ServeLoadFormat>& extras) {
  Prepared p = prepare(f, extras);
  const ChatTemplate tmpl = choose_chat_template(f, p.tokenizer_dir);  // a template that does not compile is a start-up error
  if (!tmpl.present() && !p.api.default_template_kwargs.empty())
    fail_arg(
        "--default-chat-template-kwargs: the model has no chat_template.jinja (give one with "
        "--chat-template)");
  for (auto it = p.api.default_template_kwargs.begin(); it != p.api.default_template_kwargs.end(); ++it)
    if (!tmpl.accepts_kwarg(it.key()))
      fail_arg("--default-chat-template-kwargs: key '{}' is not read by the chat template", it.key());
  SignalWatcher signals;

  p.api.version = version;
  if (p.engine.max_model_len > 0) p.api.max_model_len_hint = p.engine.max_model_len;
  if (p.api.api_keys.empty() && !is_loopback(p.http.host))
    DG_LOG_WARN("serve", "listening on {} without an API key: anyone who can reach it may use it (set --api-key, "
                "DGEMMA_API_KEY or VLLM_API_KEY)", p.http.host);
  ApiServer api(p.api);
  HttpServer http(p.http);
  api.attach(http);
  const int port = http.bind();  // a taken port is an error here, before anything loads

  std::atomic<bool> stop{false};    // a signal asked for the drain
  std::atomic<bool> loaded{false};  // until then a signal exits at once
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  signals.start([&](int sig) {
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (!loaded) {
      // Nothing to drain yet, and the load may take minutes: leave at once.
      DG_LOG_INFO("serve", "received {} while loading the model: exiting", name);
      std::fflush(stderr);
      std::_Exit(128 + sig);
    }
    DG_LOG_INFO("serve", "received {}: draining (up to {} s; a second signal exits at once)", name, f.shutdown_timeout);
    {
      std::lock_guard<std::mutex> lock(stop_mu);
      stop = true;
    }
    stop_cv.notify_all();
  });
  std::thread http_thread([&] { http.serve(); });
  DG_LOG_INFO("serve", "listening on {}://{}:{}{} (model loading; /health answers 503 until ready)",
              p.http.ssl_certfile.empty() ? "http" : "https", p.http.host, port, p.http.root_path);

  std::shared_ptr<EngineInterface> engine;
  std::string engine_failure;  // the engine stopped for good (EngineInterface::failure)
  int rc = 0;
  try {
    auto tokenizer = std::shared_ptr<const Tokenizer>(
        Tokenizer::from_file((std::filesystem::path(p.tokenizer_dir) / "tokenizer.json").string()));
    const ModelConfig mc = load_model_config(p.model_dir);
    log_sampler_defaults(p.engine, mc);
    if (p.extra_format) {
      engine = p.extra->create(p.engine, *p.extra_format, tokenizer);
      DG_LOG_INFO("serve", "--load-format {}{}: {}", p.extra->prefix, *p.extra_format, p.extra->help);
    } else {
      engine = create_model_engine(p.engine);
    }
    if (engine->vocab_size() > tokenizer->vocab_size())
      DG_LOG_WARN("serve", "model vocabulary ({}) is larger than the tokenizer's ({})", engine->vocab_size(),
                  tokenizer->vocab_size());
    LoadedModel m;
    m.engine = engine;
    m.tokenizer = tokenizer;
    m.prompts = std::make_shared<const PromptBuilder>(*tokenizer, tmpl);
    api.set_ready(std::move(m));
    loaded = true;
    DG_LOG_INFO("serve", "ready: serving '{}' (max_model_len {}, max_num_seqs {})", p.api.served_names.front(),
                engine->max_model_len(), engine->stats().max_num_seqs);
    // Serves until a signal asks for the drain or the engine stops for good (a tensor-parallel rank
    // died: its requests have already ended with the error), polled every 100 ms.
    std::optional<StatsLogger> stats;
    auto period = std::chrono::milliseconds(0);
    if (!f.disable_log_stats) {
      // vLLM's interval variable, default 10 s.
      double interval = 10;
      if (const char* v = std::getenv("VLLM_LOG_STATS_INTERVAL"); v && *v) {
        char* end = nullptr;
        const double d = std::strtod(v, &end);
        if (end && *end == 0 && d >= 0.05 && d <= 3600) interval = d;
        else DG_LOG_WARN("serve", "VLLM_LOG_STATS_INTERVAL '{}' ignored (seconds between 0.05 and 3600)", v);
      }
      stats.emplace(*engine, api.server_metrics());
      period = std::chrono::milliseconds(static_cast<int64_t>(interval * 1000));
    }
    auto next_tick = std::chrono::steady_clock::now() + period;
    std::unique_lock<std::mutex> lock(stop_mu);
    while (!stop_cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop.load(); })) {
      if (std::string why = engine->failure(); !why.empty()) {
        engine_failure = why;
        break;
      }
      if (stats && std::chrono::steady_clock::now() >= next_tick) {
        stats->tick();
        next_tick += period;
      }
    }
    if (!engine_failure.empty()) {
      lock.unlock();
      DG_LOG_ERROR("serve", "the engine stopped: {}; shutting down", engine_failure);
      std::fprintf(stderr, "dgemma: error: the engine stopped: %s\n", engine_failure.c_str());
      api.begin_shutdown("the engine stopped: " + engine_failure);
      rc = 1;
    }
  } catch (const Error& e) {
    DG_LOG_ERROR("serve", "{}", e.what());
    std::fprintf(stderr, "dgemma: error: %s\n", e.what());
    rc = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dgemma: internal error: %s\n", e.what());
    rc = 2;
  }
  loaded = true;  // from here a signal means "drain", and the second one exits
  // Graceful drain: refuse new work, stop accepting, let running requests finish in time. A request
  // is done once its response is written: a non-streaming handler returns its body before the worker
  // writes it, and stop() below cuts the responses still being written.
  api.begin_shutdown();
  http.stop_accepting();
  const auto unfinished = [&] { return api.active_requests() > 0 || http.responses_in_progress() > 0; };
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(f.shutdown_timeout * 1000));
  while (unfinished() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (const int left = api.active_requests(); left > 0) {
    DG_LOG_WARN("serve", "shutdown timeout ({} s): cutting {} request(s) with 503", f.shutdown_timeout, left);
    api.cut_running();
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (unfinished() && std::chrono::steady_clock::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  http.stop();
  http_thread.join();
  if (!engine_failure.empty()) {
    // The responses are written; a rank may still be running (left behind, TensorParallelModel::run), so
    // the process leaves without tearing the engine down.
    DG_LOG_INFO("serve", "stopped (exit status {})", rc);
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  engine.reset();
  DG_LOG_INFO("serve", "stopped");
  return rc;
}

}  // namespace

void add_serve_command(CLI::App& app, CommandList& out, std::vector<ServeLoadFormat> extras) {
  auto f = std::make_shared<ServeFlags>();
  auto* sub =
      app.add_subcommand("serve", "Serve an OpenAI-compatible API (vLLM-compatible flags; docs/API.md)");
  sub->add_option("MODEL", f->model,
                  "A model directory (config.json, tokenizer.json, weights) or a Hugging Face repo id (org/name) "
                  "found in the local cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub); never downloads");
  sub->add_option("--model", f->model_option, "The same as MODEL (vLLM's other form)");
  sub->add_option("--revision", f->revision, "Branch, tag or commit of a repo id in the cache (default main)");
  sub->add_option("--download-dir", f->download_dir, "A Hugging Face cache directory searched before the default ones");
  sub->add_option("--tokenizer", f->tokenizer,
                  "Directory or cached repo id with tokenizer.json (and chat_template.jinja); default: MODEL");
  sub->add_option("--host", f->host, "Address to listen on (default 127.0.0.1; use a proxy for exposure)");
  sub->add_option("--port", f->port, "Port (default 8000; 0 picks a free port)");
  sub->add_option("--served-model-name", f->served_model_name,
                  "Model name(s) accepted in requests and reported by /v1/models (default: MODEL)");
  sub->add_option("--max-model-len", f->max_model_len,
                  "Context length in tokens (e.g. 32768, 32k, 128K); at most, and by default, the model's "
                  "max_position_embeddings (it reserves no memory: requests take KV pages as they grow)");
  sub->add_option("--max-num-seqs", f->max_num_seqs, "Requests running at once, 1 to 1024 (default 4)");
  sub->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "Token budget per engine step (0: derived)");
  sub->add_option("--max-queue", f->max_queue, "Waiting requests beyond --max-num-seqs before 503 (default 1024)");
  sub->add_option("--gpu-memory-utilization", f->gpu_memory_utilization, "Fraction of GPU memory to use (default 0.9)");
  sub->add_option("--diffusion-config", f->diffusion_config,
                  "JSON: {\"canvas_length\": N, \"max_denoising_steps\": N}");
  sub->add_option("--hf-overrides", f->hf_overrides,
                  "JSON overrides of config.json; diffusion_sampler must be \"entropy_bound\"; "
                  "diffusion_entropy_bound sets the sampler's bound");
  sub->add_option("--generation-config", f->generation_config,
                  "Where sampler defaults come from: auto (model dir), vllm (built-in defaults) or a directory");
  sub->add_option("--override-generation-config", f->override_generation_config,
                  "JSON overriding generation_config.json keys (max_new_tokens sets the default max_tokens)");
  sub->add_flag("--enable-auto-tool-choice", f->enable_auto_tool_choice,
                "Let the model call tools when tool_choice is auto (needs --tool-call-parser)");
  sub->add_option("--tool-call-parser", f->tool_call_parser, "Tool-call parser: gemma4");
  sub->add_option("--reasoning-parser", f->reasoning_parser,
                  "Reasoning parser: gemma4 (thought channel -> reasoning_content / reasoning)");
  sub->add_option("--default-chat-template-kwargs", f->default_chat_template_kwargs,
                  "JSON defaults for chat_template_kwargs, e.g. {\"enable_thinking\": true}");
  sub->add_option(
      "--chat-template", f->chat_template,
      "A Jinja chat template: a file or the template text itself; default: the model's chat_template.jinja");
  sub->add_option("--api-key", f->api_keys,
                  "Require this key (Bearer or X-Api-Key) on /v1/*; repeatable. Default: $DGEMMA_API_KEY, else $VLLM_API_KEY");
  sub->add_option("--dtype", f->dtype, "auto or bfloat16");
  sub->add_option("-q,--quantization", f->quantization,
                  "checkpoint quantisation (auto-detected when absent): modelopt | modelopt_fp4 | compressed-tensors | fp8 | none");
  std::string load_formats = "auto, safetensors or dummy (random weights)";
  for (const ServeLoadFormat& x : extras) load_formats += ", or " + x.prefix + "... (" + x.help + ")";
  sub->add_option("--load-format", f->load_format, load_formats);
  sub->add_option("--device", f->device, "auto, cpu or cuda");
  sub->add_option("--kernel-family", f->kernel_family,
                  "CUDA kernels: auto (hopper on an sm_90 GPU, else portable), hopper (the sm_90 kernels: "
                  "H100 / H200 only) or portable (the sm_80 mma.sync kernels every GPU runs)");
  sub->add_option("--fp8-moe", f->fp8_moe,
                  "CUDA, FP8-dynamic experts: auto (w8a8 with the hopper kernels, else w8a16), w8a8 (the "
                  "checkpoint's FP8 activations, the faster at every batch) or w8a16 (bf16 activations, not "
                  "the checkpoint's maths)");
  sub->add_option("--seed", f->seed,
                  "Base seed for requests without their own seed (default 0; -1: a random one)");
  sub->add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", f->enable_chunked_prefill,
                "Split long prompts over several engine steps (default on)");
  sub->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", f->enable_prefix_caching,
                "Reuse the KV of shared prompt prefixes and committed canvases (default on)");
  sub->add_option("--kv-cache-memory", f->kv_cache_memory,
                  "Bytes of KV cache (e.g. 20GiB); default: what --gpu-memory-utilization leaves after weights and buffers");
  sub->add_flag("--strict-params", f->strict_params, "Reject requests with unknown fields (400) instead of ignoring them");
  sub->add_option("--sse-ping-interval", f->sse_ping_interval,
                  "Seconds between keep-alive pings while a request waits (default 10)");
  sub->add_option("--max-request-bytes", f->max_request_bytes, "Largest accepted request body (default 32 MiB)");
  sub->add_option("--log-level", f->log_level, "debug, info, warn, error or off");
  sub->add_option("--attention-backend", f->attention_backend, "vLLM compatibility: accepted and logged");
  sub->add_flag("--trust-remote-code", f->trust_remote_code, "vLLM compatibility: accepted and logged");
  sub->add_flag("--enforce-eager", f->enforce_eager, "No CUDA graphs: every step runs op by op (as vLLM's flag)");
  sub->add_flag("--no-warmup", f->no_warmup,
                "Skip the start-up warm-up (GPU: a short prefill and two steps per batch-size bucket, so that the first "
                "request is as fast as the next ones)");
  sub->add_flag("--disable-log-requests", f->disable_log_requests, "No access log line per request");
  sub->add_flag("--disable-uvicorn-access-log", f->disable_uvicorn_access_log, "The same as --disable-log-requests");
  sub->add_flag("--disable-log-stats", f->disable_log_stats,
                "No periodic stats line (default: every $VLLM_LOG_STATS_INTERVAL seconds, 10)");
  sub->add_option("--shutdown-timeout", f->shutdown_timeout,
                  "Seconds SIGTERM/SIGINT lets running requests finish before cutting them with 503 (default 25)");
  sub->add_option("--request-read-timeout", f->request_read_timeout,
                  "Seconds a client has to send one whole request, headers and body (default 30; then 408)");
  sub->add_option("--max-connections", f->max_connections,
                  "Open connections at most; beyond it the longest-waiting idle one is closed (default 4096)");
  sub->add_option("--allowed-origins", f->allowed_origins, "CORS: JSON list of allowed origins (default [\"*\"])");
  sub->add_option("--allowed-methods", f->allowed_methods, "CORS: JSON list of allowed methods (default [\"*\"])");
  sub->add_option("--allowed-headers", f->allowed_headers, "CORS: JSON list of allowed headers (default [\"*\"])");
  sub->add_flag("--allow-credentials", f->allow_credentials, "CORS: allow credentials");
  sub->add_option("--root-path", f->root_path, "Also serve every route under this path prefix (behind a proxy)");
  sub->add_option("--response-role", f->response_role, "Role of chat completion messages (default assistant)");
  sub->add_option("--ssl-keyfile", f->ssl_keyfile, "PEM private key: serve HTTPS (with --ssl-certfile)");
  sub->add_option("--ssl-certfile", f->ssl_certfile, "PEM certificate chain: serve HTTPS (with --ssl-keyfile)");
  sub->add_option("--kv-cache-dtype", f->kv_cache_dtype, "auto or bfloat16 (the KV cache is bfloat16)");
  sub->add_option("--data-parallel-size", f->data_parallel_size,
                  "N engine replicas behind this server, one per GPU (CPU: N engines); also -dp N");
  sub->add_option("--pipeline-parallel-size", f->pipeline_parallel_size, "Must be 1 (also accepted as -pp 1)");
  // vLLM tuning knobs that mean nothing here: accepted, and logged as having no effect.
  sub->add_option("--tokenizer-mode", f->tokenizer_mode,
                  "auto, hf or slow: the checkpoint's tokenizer.json either way");
  sub->add_option("--task", f->task, "auto or generate (the only task of this server)");
  sub->add_option(
      "--chat-template-content-format", f->chat_template_content_format,
      "auto | openai: message content reaches the template as given (a string or a list of text parts); "
      "string: a list of text parts is joined with newlines first");
  sub->add_flag("--enable-force-include-usage", f->enable_force_include_usage,
                "Every stream ends with a usage chunk, as if stream_options.include_usage were set");
  sub->add_flag("--return-tokens-as-token-ids", f->return_tokens_as_token_ids,
                "Logprobs name tokens as \"token_id:N\" instead of their text");
  sub->add_option(
      "--limit-mm-per-prompt", f->limit_mm_per_prompt,
      "Images a prompt may hold, as JSON: '{\"image\": N}' (default 999; 0: text only, the vision "
      "tower is not loaded)");
  sub->add_option(
         "--image-attention", f->image_attention,
         "How an image's tokens attend: generate (each image block sees itself whole in every layer, "
         "the reference's generate(); default), gemma4 (sliding layers only, within the window) or causal")
      ->check(CLI::IsMember({"generate", "gemma4", "causal"}));
  sub->add_option("--allowed-local-media-path", f->allowed_local_media_path,
                  "Directory whose files image_url parts may name as file:// URLs (default: none)");
  sub->add_option("--max-image-bytes", f->max_image_bytes, "Largest image file accepted (default 20MiB)");
  sub->add_option("--max-image-pixels", f->max_image_pixels,
                  "Largest image accepted, in pixels (default 40000000), checked before decoding");
  sub->add_option("--media-io-kwargs", f->media_io_kwargs,
                  "'{\"image\": {\"rgba_background_color\": [r, g, b]}}': the background RGBA images are "
                  "composited over (default white)");
  // vLLM tuning and deployment knobs that mean nothing here: accepted, and logged as having no effect.
  for (const char* name :
       {"--swap-space", "--block-size", "--max-cudagraph-capture-size", "--compilation-config",
        "--uvicorn-log-level", "--max-log-len", "--max-logprobs", "--distributed-executor-backend",
        "--max-seq-len-to-capture", "--tokenizer-pool-size", "--guided-decoding-backend",
        "--structured-outputs-config"}) {
    const std::string flag = name;
    sub->add_option_function<std::string>(
           flag, [f, flag](const std::string& v) { f->no_effect.emplace_back(flag, v); },
           "vLLM tuning knob: accepted, no effect")
        ->group("vLLM compatibility (no effect)");
  }
  for (const char* name : {"--async-scheduling", "--disable-fastapi-docs", "--enable-log-requests",
                           "--disable-custom-all-reduce", "--disable-frontend-multiprocessing",
                           "--enable-sleep-mode", "--enable-prompt-tokens-details", "--enable-reasoning"}) {
    const std::string flag = name;
    sub->add_flag_callback(flag, [f, flag] { f->no_effect.emplace_back(flag, ""); }, "vLLM knob: accepted, no effect")
        ->group("vLLM compatibility (no effect)");
  }
  sub->add_option(
      "--tensor-parallel-size", f->tensor_parallel_size,
      "Split the model over N ranks: 1, 2, 4 or 8 (also -tp N); CUDA: one GPU per rank (NCCL), CPU: "
      "one thread per rank");
  sub->add_flag(
      "--enable-expert-parallel", f->enable_expert_parallel,
      "With -tp N: experts split by expert (each rank holds E / N whole experts; dgemma's only split of "
      "the experts, so on or off the same)");
  sub->add_option(
      "--config", f->config_file,
      "vLLM's YAML config file: flag: value lines (long flag names); the command line wins over it");
  Command c{sub, [f, sub, extras] {
              if (!f->config_file.empty()) apply_config_file(*sub, f->config_file, "MODEL");
              return run_serve(*f, DGEMMA_VERSION, extras);
            }};
  c.handles_stop_signals = true;
  out.push_back(std::move(c));
}

}  // namespace dgemma::cli
