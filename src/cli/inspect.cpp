// dgemma inspect MODEL: config summary, parameter counts, bytes by dtype, the KV/memory plan and a
// checkpoint validation (cli/inspect_report.h builds and formats the report).
// Exit status: 0 when the checkpoint validates (or weights are dummy), 1 when it lists problems.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/inspect_report.h"
#include "cli/vllm_compat.h"

namespace dgemma::cli {

void add_inspect_command(CLI::App& app, CommandList& out) {
  auto* sub = app.add_subcommand("inspect", "Describe a model directory: config, parameters, memory plan, checkpoint validation");
  auto opts = std::make_shared<InspectOptions>();
  auto json = std::make_shared<bool>(false);
  auto canvas = std::make_shared<int>(0);
  auto revision = std::make_shared<std::string>();
  auto download_dir = std::make_shared<std::string>();
  sub->add_option("MODEL", opts->model_dir,
                  "Model directory (config.json [+ generation_config.json] [+ *.safetensors]) or a Hugging "
                  "Face repo id "
                  "(org/name) in the local cache, as dgemma serve takes it")
      ->required();
  sub->add_option("--revision", *revision, "Branch, tag or commit of a repo id in the cache (default main)");
  sub->add_option("--download-dir", *download_dir,
                  "A Hugging Face cache directory searched before the default ones");
  sub->add_option("--load-format", opts->load_format,
                  "auto (safetensors when present, else dummy) | safetensors | dummy (shapes from the config only)")
      ->check(CLI::IsMember({"auto", "safetensors", "dummy"}))
      ->capture_default_str();
  sub->add_option("--max-model-len", opts->max_model_len, "Tokens per sequence (default: max_position_embeddings)");
  sub->add_option("--max-num-seqs", opts->max_num_seqs, "Concurrent sequences in the memory plan")->capture_default_str();
  sub->add_option("--max-num-batched-tokens", opts->max_num_batched_tokens, "Tokens per engine step (default: derived)");
  sub->add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", opts->enable_chunked_prefill,
                "Prompts encoded in chunks of at most 2048 tokens (default on)");
  auto* kv_mem = sub->add_option("--kv-cache-memory", opts->kv_cache_memory, "Bytes of KV pool (default: what the budget leaves)");
  (void)kv_mem;
  auto* canvas_opt = sub->add_option("--canvas-length", *canvas, "Override config.json's canvas_length");
  auto gpu_bytes = std::make_shared<double>(0);
  auto* gpu_opt =
      sub->add_option("--gpu-memory-bytes", *gpu_bytes,
                      "GPU memory in bytes to plan for (default: this machine's GPU; without one, the plan "
                      "has no KV pool)");
  sub->add_option("--tensor-parallel-size", opts->tensor_parallel_size,
                  "GPUs the model is split over: the plan is per GPU (1, 2, 4 or 8)")
      ->capture_default_str();
  sub->add_option("--gpu-memory-utilization", opts->gpu_memory_utilization, "Fraction of GPU memory the plan may use")
      ->capture_default_str();
  sub->add_flag("--enforce-eager", opts->enforce_eager, "The plan without the CUDA graph pool (as dgemma serve --enforce-eager)");
  sub->add_flag("--json", *json, "Print the report as JSON");
  out.push_back({sub, [opts, json, canvas, canvas_opt, revision, download_dir, gpu_bytes, gpu_opt] {
                   if (canvas_opt->count() > 0) opts->canvas_length = *canvas;
                   if (gpu_opt->count() > 0) opts->gpu_memory_bytes = *gpu_bytes;
                   opts->model_dir = resolve_cli_model(opts->model_dir, *revision, *download_dir);
                   const InspectReport report = build_inspect_report(*opts);
                   const std::string text = *json ? inspect_report_json(report).dump(2) + "\n" : format_inspect_text(report);
                   std::fwrite(text.data(), 1, text.size(), stdout);
                   std::fflush(stdout);
                   return report.validation.ok() ? 0 : 1;
                 }});
}

}  // namespace dgemma::cli
