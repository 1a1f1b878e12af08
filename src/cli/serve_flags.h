#pragma once
// dgemma serve's flags as CLI11 fills them (serve.cpp registers them, docs/API.md lists them) and the
// parsing of the flag values that need more than CLI11: JSON, byte and token counts, the log level,
// the image input policy and the chat template.
#include <cstdint>
#include <string>
#include <vector>

#include "api/openai/image_input.h"
#include "text/chat/chat_template.h"
#include "util/json.h"
#include "util/log.h"

namespace dgemma::cli {

struct ServeFlags {
  std::string model;         // positional MODEL
  std::string model_option;  // --model (vLLM's other form)
  std::string revision;
  std::string download_dir;
  std::string tokenizer;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<std::string> served_model_name;
  std::string max_model_len;
  int max_num_seqs = -1;  // -1: engine default
  int64_t max_num_batched_tokens = 0;
  int max_queue = 1024;
  double gpu_memory_utilization = 0.9;
  std::string diffusion_config;
  std::string hf_overrides;
  std::string generation_config = "auto";
  std::string override_generation_config;
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
  std::string reasoning_parser;
  std::string default_chat_template_kwargs;
  std::string chat_template;
  std::vector<std::string> api_keys;
  std::string dtype = "auto";
  std::string quantization;
  std::string load_format = "auto";
  std::string device = "auto";
  std::string kernel_family = "auto";  // CUDA: auto | hopper | portable (cuda_options.h)
  std::string fp8_moe = "auto";        // CUDA: FP8-dynamic experts auto | w8a8 | w8a16
  int64_t seed = 0;  // -1: a random base seed
  bool enable_chunked_prefill = true;
  bool enable_prefix_caching = true;
  std::string kv_cache_memory;
  bool strict_params = false;
  double sse_ping_interval = 10;
  int64_t max_request_bytes = 32 << 20;
  std::string log_level = "info";
  double shutdown_timeout = 25;
  double request_read_timeout = 30;
  int max_connections = 4096;
  // Behaviour flags of vLLM implemented here.
  std::string allowed_origins;  // JSON list
  std::string allowed_methods;
  std::string allowed_headers;
  bool allow_credentials = false;
  std::string root_path;
  std::string response_role = "assistant";
  std::string ssl_keyfile;
  std::string ssl_certfile;
  std::string kv_cache_dtype = "auto";
  int data_parallel_size = 1;
  bool enable_expert_parallel = false;
  int pipeline_parallel_size = 1;
  bool disable_uvicorn_access_log = false;
  // Pure tuning knobs of vLLM: accepted and logged as having no effect (name -> value given).
  std::vector<std::pair<std::string, std::string>> no_effect;
  // vLLM-only knobs, accepted and logged.
  std::string attention_backend;
  bool trust_remote_code = false;
  bool enforce_eager = false;
  bool no_warmup = false;
  bool disable_log_requests = false;
  bool disable_log_stats = false;
  int tensor_parallel_size = 1;
  std::string config_file;  // --config (applied before the rest is read)
  // vLLM flags with a meaning here.
  std::string tokenizer_mode = "auto";
  std::string chat_template_content_format = "auto";
  std::string task = "auto";
  bool enable_force_include_usage = false;
  bool return_tokens_as_token_ids = false;
  // Images.
  std::string limit_mm_per_prompt;  // --limit-mm-per-prompt '{"image": N}'
  std::string image_attention = "generate";
  std::string allowed_local_media_path;
  std::string max_image_bytes = "20MiB";
  int64_t max_image_pixels = 40000000;
  std::string media_io_kwargs;  // '{"image": {"rgba_background_color": [r, g, b]}}'
};

// Where image_url parts may come from and what one image may cost (--allowed-local-media-path,
// --max-image-bytes, --max-image-pixels, --media-io-kwargs).
ImageInputPolicy image_input_policy(const ServeFlags& f);
// A flag's JSON value (an object), or a clear error naming the flag.
Json parse_flag_json(const std::string& text, const std::string& flag);
// "20MiB", "1.5GB", "4096": bytes.
uint64_t parse_byte_count(const std::string& s, const std::string& flag);
// "32k", "1M", "8192": tokens.
int64_t parse_token_count(const std::string& s, const std::string& flag);
LogLevel parse_log_level(const std::string& s);
// --chat-template (a file or the template text), else the model's own template.
ChatTemplate choose_chat_template(const ServeFlags& f, const std::string& tokenizer_dir);

}  // namespace dgemma::cli
