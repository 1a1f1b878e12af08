#include "cli/inspect_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "backend/backend.h"
#include "backend/device_memory.h"
#include "backend/workspace_bounds.h"
#include "model/safetensors.h"
#include "model/shard_plan.h"
#include "util/error.h"
#include "util/mmap_file.h"

namespace dgemma {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDecoderPrefix = "model.decoder.";
constexpr const char* kEncoderPrefix = "model.encoder.language_model.";
constexpr uint64_t kBf16Bytes = 2;


std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// 25250986782 -> "25,250,986,782"
std::string group_digits(uint64_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string billions(int64_t n) { return fmt::format("{:.3f} B  ({})", n / 1e9, group_digits(static_cast<uint64_t>(n))); }
std::string gigabytes(uint64_t b) { return fmt::format("{:.3f} GB  ({} bytes)", b / 1e9, group_digits(b)); }

std::string id_list(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out.empty() ? "(none)" : out;
}

std::string int_list(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out;
}

const char* short_type(LayerType t) { return t == LayerType::kSliding ? "sliding" : "full"; }

std::string rope_str(const RopeParams& r) {
  if (r.type == RopeType::kDefault) return fmt::format("default, theta {}", r.theta);
  return fmt::format("proportional, theta {}, partial rotary factor {}", r.theta, r.partial_rotary_factor);
}

std::vector<LayerGroup> group_layers(const std::vector<LayerSpec>& layers) {
  std::vector<LayerGroup> groups;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& L = layers[i];
    auto it = std::find_if(groups.begin(), groups.end(), [&](const LayerGroup& g) {
      return g.type == L.type && g.head_dim == L.head_dim && g.num_kv_heads == L.num_kv_heads && g.k_eq_v == L.k_eq_v;
    });
    if (it == groups.end()) {
      groups.push_back({L.type, L.head_dim, L.num_kv_heads, L.k_eq_v, {}});
      it = groups.end() - 1;
    }
    it->layers.push_back(static_cast<int>(i));
  }
  return groups;
}

bool has_safetensors(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "model.safetensors.index.json", ec)) return true;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".safetensors" && it->is_regular_file(ec)) return true;
  return false;
}

// Compares the checkpoint's header metadata with expected_weights() by the rules load_weights applies,
// without reading tensor data; every problem is listed.
void check_checkpoint(const ModelConfig& config, const SafetensorsCheckpoint& ckpt, CheckpointSummary& sum,
                      ValidationReport& v) {
  std::set<std::string> used;
  auto check = [&](const TensorInfo* x, const WeightSpec& s) {
    if (x->dtype != DType::kBF16 && x->dtype != DType::kF16 && x->dtype != DType::kF32)
      v.problems.push_back(fmt::format("tensor {} in {} has dtype {}; expected BF16 (F16/F32 are converted)", x->name,
                                       x->file, dtype_name(x->dtype)));
    if (x->shape != s.shape)
      v.problems.push_back(fmt::format("tensor {} in {} has shape {}; expected {}", x->name, x->file,
                                       shape_str(x->shape), shape_str(s.shape)));
  };
  for (const WeightSpec& s : expected_weights(config)) {
    const TensorInfo* dec = ckpt.find(kDecoderPrefix + s.name);
    const TensorInfo* enc = ckpt.find(kEncoderPrefix + s.name);
    if (dec) used.insert(dec->name);
    if (enc) used.insert(enc->name);
    sum.text_tensors += (dec ? 1 : 0) + (enc ? 1 : 0);
    if (dec && enc) ++sum.encoder_copies;
    if (is_linear_group(s.group) && (s.group != WeightGroup::kExperts || (!dec && !enc))) {  // any format
      if (auto f = check_linear_headers(config, ckpt, s, used, v.problems)) sum.linear_formats[weight_format_name(*f)]++;
      continue;
    }
    if (!dec && !enc) {
      v.problems.push_back(fmt::format("missing tensor {}{} (expected shape {})", kDecoderPrefix, s.name, shape_str(s.shape)));
      continue;
    }
    if (s.group == WeightGroup::kExperts) sum.linear_formats["bf16"]++;  // fused bf16 experts
    // load_weights reads both layer_scalar copies (the buffers are not tied); other tensors from one.
    if (s.group == WeightGroup::kScalar) {
      if (dec) check(dec, s);
      if (enc) check(enc, s);
    } else {
      check(dec ? dec : enc, s);
    }
  }
  // The vision tower's tensors, by the rules load_weights applies to them (names, shapes, dtypes).
  if (config.has_vision) check_vision_headers(config, ckpt, used, v.problems);
  for (const TensorInfo* t : ckpt.tensors()) {
    auto& d = sum.by_dtype[dtype_name(t->dtype)];
    ++d.tensors;
    d.bytes += t->nbytes;
    if (is_vision_tensor(t->name)) {
      ++sum.vision_tensors;
      sum.vision_bytes += t->nbytes;
      continue;
    }
    if (used.count(t->name)) continue;
    if (t->name == "lm_head.weight") {
      sum.lm_head = true;
    } else {
      sum.unexpected.push_back(t->name);
    }
  }
  if (sum.lm_head) v.warnings.push_back("lm_head.weight present: ignored, the LM head is tied to the embedding");
  if (!sum.unexpected.empty()) {
    std::string list;
    for (size_t i = 0; i < sum.unexpected.size() && i < 8; ++i) list += (i ? ", " : "") + sum.unexpected[i];
    v.warnings.push_back(fmt::format("{} unexpected tensor(s) ignored: {}{}", sum.unexpected.size(), list,
                                     sum.unexpected.size() > 8 ? ", ..." : ""));
  }
}

void check_options(const InspectOptions& o) {
  if (o.model_dir.empty()) fail_arg("inspect: MODEL (a model directory holding config.json) is required");
  if (o.load_format != "auto" && o.load_format != "safetensors" && o.load_format != "dummy")
    fail_arg("--load-format '{}' is not one of auto, safetensors, dummy", o.load_format);
  if (o.max_num_seqs < 1 || o.max_num_seqs > (1 << 20)) fail_arg("--max-num-seqs {} is out of range [1, 1048576]", o.max_num_seqs);
  if (o.max_model_len < 0) fail_arg("--max-model-len {} must be positive", o.max_model_len);
  if (o.gpu_memory_bytes &&
      (!std::isfinite(*o.gpu_memory_bytes) || *o.gpu_memory_bytes < 1 || *o.gpu_memory_bytes > 9.0e18))
    fail_arg("--gpu-memory-bytes {} must be a positive byte count", *o.gpu_memory_bytes);
  if (!std::isfinite(o.gpu_memory_utilization) || o.gpu_memory_utilization <= 0 || o.gpu_memory_utilization > 1)
    fail_arg("--gpu-memory-utilization {} must be in (0, 1]", o.gpu_memory_utilization);
  if (o.canvas_length && (*o.canvas_length < 1 || *o.canvas_length > 65536))
    fail_arg("--canvas-length {} is out of range [1, 65536]", *o.canvas_length);
}

}  // namespace


std::string layer_type_pattern(const std::vector<LayerSpec>& layers) {
  const size_t n = layers.size();
  auto rle = [&](size_t len) {
    std::string out;
    for (size_t i = 0; i < len;) {
      size_t j = i;
      while (j < len && layers[j].type == layers[i].type) ++j;
      out += fmt::format("{}{}×{}", out.empty() ? "" : ", ", j - i, short_type(layers[i].type));
      i = j;
    }
    return out;
  };
  for (size_t p = 1; p < n; ++p) {
    if (n % p != 0) continue;
    bool periodic = true;
    for (size_t i = p; i < n && periodic; ++i) periodic = layers[i].type == layers[i % p].type;
    if (periodic) return fmt::format("({}) ×{}", rle(p), n / p);
  }
  return rle(n);
}

InspectReport build_inspect_report(const InspectOptions& o) {
  check_options(o);
  InspectReport r;
  r.model_dir = o.model_dir;
  const fs::path dir(o.model_dir);
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw Error(ErrorKind::kNotFound, fmt::format("{}: no such model directory", o.model_dir));
  if (!fs::is_directory(dir, ec))
    fail_arg("{}: not a directory (MODEL is a model directory holding config.json)", o.model_dir);
  const std::string config_path = (dir / "config.json").string();
  if (!fs::exists(config_path, ec))
    throw Error(ErrorKind::kNotFound,
                fmt::format("{}: no config.json in this directory (expected a Hugging Face model directory)", o.model_dir));

  // Parsed here rather than through load_model_config so "architectures" (not part of ModelConfig)
  // comes from the same read.
  const Json j = parse_json(read_text_file(config_path, 16u << 20), config_path, /*is_file=*/true);
  r.config = parse_model_config(j, config_path);
  if (j.contains("architectures") && j.at("architectures").is_array())
    for (const auto& a : j.at("architectures"))
      if (a.is_string()) r.architectures.push_back(a.get<std::string>());
  r.text_model_type = "diffusion_gemma_text";  // parse_model_config accepted it; absent means this
  if (const Json& tc = j.at("text_config"); tc.contains("model_type") && tc.at("model_type").is_string())
    r.text_model_type = tc.at("model_type").get<std::string>();
  if (o.canvas_length) {
    r.config.canvas_length = *o.canvas_length;
    validate_model_config(r.config, config_path + " with --canvas-length " + std::to_string(*o.canvas_length));
  }
  r.generation_config_file = fs::exists(dir / "generation_config.json", ec);
  r.generation = load_generation_config(o.model_dir, r.config);

  const TextConfig& t = r.config.text;
  int64_t max_len = o.max_model_len;
  if (max_len == 0) max_len = t.max_position_embeddings;  // as the engine: the model's context
  if (max_len > t.max_position_embeddings)
    fail_arg("--max-model-len {} exceeds the model's max_position_embeddings {}", max_len, t.max_position_embeddings);

  r.params = count_parameters(r.config);
  r.layer_groups = group_layers(t.layers);
  r.layer_pattern = layer_type_pattern(t.layers);
  for (size_t i = 0; i < t.layers.size(); ++i)
    if (t.layers[i].type == LayerType::kFull) r.full_layers.push_back(static_cast<int>(i));

  if (o.load_format == "auto") {
    const bool found = has_safetensors(dir);
    r.load_format = found ? "safetensors" : "dummy";
    r.load_format_note = found ? "auto: *.safetensors found" : "auto: no *.safetensors in the directory, shapes from config.json";
  } else {
    r.load_format = o.load_format;
    r.load_format_note = o.load_format == "dummy" ? "shapes from config.json, no weights read" : "";
  }

  if (r.load_format == "safetensors") {
    const SafetensorsCheckpoint ckpt(o.model_dir);  // headers only; data stays unread in the mmaps
    CheckpointSummary& s = r.checkpoint;
    s.present = true;
    s.path = o.model_dir;
    s.files = static_cast<int>(ckpt.files().size());
    s.tensors = static_cast<int64_t>(ckpt.tensors().size());
    s.total_bytes = ckpt.total_bytes();
    check_checkpoint(r.config, ckpt, s, r.validation);
    r.bytes_by_dtype = s.by_dtype;
    if (s.total_bytes <= o.full_load_limit_bytes) {
      r.validation.method = "header check + load_weights on the CPU backend";
      r.validation.loaded = true;
      try {
        auto cpu = make_cpu_backend();
        (void)load_weights(r.config, o.model_dir, *cpu);
      } catch (const Error& e) {
        r.validation.load_error = e.what();
        // The header check mirrors load_weights' rules; anything only the load saw is reported as is.
        if (r.validation.problems.empty()) r.validation.problems.push_back(std::string("load_weights: ") + e.what());
      }
    } else {
      r.validation.method = fmt::format("header check only (names, shapes, dtypes): {:.1f} GB is above the {:.1f} GB "
                                        "full-load limit, tensor data not read",
                                        s.total_bytes / 1e9, o.full_load_limit_bytes / 1e9);
    }
  } else {
    r.validation.method = "none (dummy weights: shapes come from the config)";
    auto& d = r.bytes_by_dtype["BF16"];
    d.tensors = static_cast<int64_t>(expected_weights(r.config).size());
    d.bytes = static_cast<uint64_t>(r.params.total) * kBf16Bytes;
  }

  MemoryPlanInputs in;
  in.max_model_len = max_len;
  in.max_num_seqs = o.max_num_seqs;
  in.max_num_batched_tokens = o.max_num_batched_tokens;
  in.enable_chunked_prefill = o.enable_chunked_prefill;
  if (o.gpu_memory_bytes) {
    in.device_bytes = static_cast<uint64_t>(*o.gpu_memory_bytes);
    r.gpu_memory_source = "--gpu-memory-bytes";
  } else if (const auto gpu = cuda_device_memory()) {
    in.device_bytes = *gpu;
    r.gpu_memory_source = "GPU 0";
  }
  in.gpu_memory_utilization = o.gpu_memory_utilization;
  in.kv_cache_memory = o.kv_cache_memory;
  validate_tensor_parallel(r.config, o.tensor_parallel_size);
  in.tensor_parallel_size = o.tensor_parallel_size;
  in.cuda_graphs = !o.enforce_eager;  // as the engine on a GPU
  r.plan = plan_memory(r.config, in);
  return r;
}

// ---- formatting ------------------------------------------------------------------------------------

namespace {

class TextOut {
 public:
  void section(const std::string& title) { out_ += (out_.empty() ? "" : "\n") + title + "\n"; }
  void row(const std::string& key, const std::string& value) { out_ += fmt::format("  {:<30} {}\n", key, value); }
  void line(const std::string& text) { out_ += "  " + text + "\n"; }
  std::string str() const { return out_; }

 private:
  std::string out_;
};

}  // namespace

std::string format_inspect_text(const InspectReport& r) {
  const ModelConfig& c = r.config;
  const TextConfig& t = c.text;
  const GenerationConfig& g = r.generation;
  const MemoryPlan& p = r.plan;
  TextOut o;

  o.section("Model: " + r.model_dir);
  o.row("model type", fmt::format("diffusion_gemma (text: {})", r.text_model_type));
  std::string arch;
  for (const auto& a : r.architectures) arch += (arch.empty() ? "" : ", ") + a;
  o.row("architecture", arch.empty() ? "(not given)" : arch);
  o.row("dtype", c.dtype);
  o.row("quantization", c.quant.quantized() ? c.quant.summary : std::string("none"));
  if (!r.checkpoint.linear_formats.empty()) {
    std::string f;
    for (const auto& [name, n] : r.checkpoint.linear_formats) f += (f.empty() ? "" : ", ") + fmt::format("{} {}", n, name);
    // How the CUDA backend runs them by default (cuda_options.h DenseQuant, Fp8Experts).
    std::string cuda_path;
    if (c.quant.nvfp4) cuda_path = "NVFP4 W4A16";
    if (c.quant.fp8)
      cuda_path += std::string(cuda_path.empty() ? "" : ", ") +
                   (c.quant.fp8_act_token ? "FP8 W8A8 with per-token FP8 activations as the checkpoint prescribes "
                                            "(W8A16 off Hopper)"
                                          : "FP8 W8A16");
    o.row("linear layers", f + (cuda_path.empty() ? std::string() : " (CUDA: " + cuda_path + ")"));
  }
  o.row("vision config",
        c.has_vision ? "present (the vision tower loads unless --limit-mm-per-prompt '{\"image\": 0}')"
                     : "absent");
  o.row("load format", r.load_format + (r.load_format_note.empty() ? "" : " (" + r.load_format_note + ")"));

  o.section("Text config");
  o.row("vocab size", group_digits(static_cast<uint64_t>(t.vocab_size)));
  o.row("hidden size", group_digits(static_cast<uint64_t>(t.hidden_size)));
  o.row("layers", std::to_string(t.num_hidden_layers));
  o.row("attention heads", std::to_string(t.num_attention_heads));
  o.row("layer types", r.layer_pattern);
  o.row("full-attention layer indices",
        r.full_layers.empty() ? "(none)" : int_list(r.full_layers) + " (from 0)");
  for (const auto& lg : r.layer_groups)
    o.row(fmt::format("{} layers ×{}", short_type(lg.type), lg.layers.size()),
          fmt::format("{} KV head{} × head dim {}{}", lg.num_kv_heads, lg.num_kv_heads == 1 ? "" : "s", lg.head_dim,
                      lg.k_eq_v ? ", K=V (no v_proj)" : ", separate K and V"));
  o.row("sliding window", group_digits(static_cast<uint64_t>(t.sliding_window)));
  o.row("dense MLP width", group_digits(static_cast<uint64_t>(t.intermediate_size)));
  o.row("experts", fmt::format("{}, top-{}, width {}", t.num_experts, t.top_k_experts, t.moe_intermediate_size));
  o.row("self-conditioning width", group_digits(static_cast<uint64_t>(t.self_conditioning_size)));
  o.row("final logit softcap", fmt::format("{}", t.final_logit_softcapping));
  o.row("RoPE (sliding)", rope_str(t.rope_sliding));
  o.row("RoPE (full)", rope_str(t.rope_full));
  o.row("RMSNorm eps", fmt::format("{}", t.rms_norm_eps));
  o.row("max position embeddings", group_digits(static_cast<uint64_t>(t.max_position_embeddings)));
  o.row("canvas length", std::to_string(c.canvas_length));
  o.row("special ids", fmt::format("pad {}, bos {}, eos {}; config eos [{}]", t.pad_token_id, t.bos_token_id,
                                   id_list(t.eos_token_ids), id_list(c.eos_token_ids)));

  o.section(std::string("Generation config (") +
            (r.generation_config_file ? "generation_config.json" : "built-in defaults") + ")");
  o.row("max denoising steps", std::to_string(g.max_denoising_steps));
  o.row("entropy bound", fmt::format("{}", g.entropy_bound));
  o.row("t_min / t_max", fmt::format("{} / {}", g.t_min, g.t_max));
  o.row("stability threshold", std::to_string(g.stability_threshold));
  o.row("confidence threshold", fmt::format("{}", g.confidence_threshold));
  o.row("max new tokens", std::to_string(g.max_new_tokens));
  o.row("EOS ids", id_list(g.eos_token_ids));

  o.section("Parameters (text model)");
  o.row("total", billions(r.params.total));
  if (r.params.vision > 0) o.row("vision tower + projection", billions(r.params.vision));
  o.row("active per token", billions(r.params.active_per_token));
  o.line("(active: attention + dense MLP + router + norms + top_k/num_experts of the experts + the embedding,");
  o.line(" which the tied LM head reads for every token; the self-conditioning MLP is not counted)");
  static const WeightGroup kGroups[] = {WeightGroup::kEmbedding, WeightGroup::kAttention,        WeightGroup::kDenseMlp,
                                        WeightGroup::kRouter,    WeightGroup::kExperts,          WeightGroup::kNorm,
                                        WeightGroup::kScalar,    WeightGroup::kSelfConditioning};
  for (WeightGroup wg : kGroups) o.row(weight_group_name(wg), billions(r.params.by_group[static_cast<int>(wg)]));

  o.section(r.checkpoint.present ? "Bytes by dtype (checkpoint, every tensor)" : "Bytes by dtype (dummy: BF16 × parameters)");
  for (const auto& [name, d] : r.bytes_by_dtype) o.row(name, gigabytes(d.bytes) + fmt::format(", {} tensors", d.tensors));
  if (r.checkpoint.present) {
    const CheckpointSummary& s = r.checkpoint;
    o.row("files / tensors", fmt::format("{} / {}", s.files, s.tensors));
    o.row("text tensors", fmt::format("{} (of which {} encoder copies of layer buffers)", s.text_tensors, s.encoder_copies));
    o.row("vision tensors", fmt::format("{}, {} bytes", s.vision_tensors, group_digits(s.vision_bytes)));
    if (s.lm_head) o.row("lm_head.weight", "present, ignored (tied)");
    if (!s.unexpected.empty()) o.row("unexpected tensors", std::to_string(s.unexpected.size()));
  }

  const int full = static_cast<int>(KvGroup::kFull), sliding = static_cast<int>(KvGroup::kSliding);
  o.section(fmt::format("KV cache (bf16, paged: {} tokens per page)", p.kv.page_size));
  o.row("per page, full layers", fmt::format("{} bytes ({} layers)", group_digits(p.kv.bytes_per_page[full]), p.kv.layers[full]));
  if (p.kv.layers[sliding])
    o.row("per page, sliding layers", fmt::format("{} bytes ({} layers, a ring of pages over the last {} positions)",
                                                  group_digits(p.kv.bytes_per_page[sliding]), p.kv.layers[sliding],
                                                  group_digits(static_cast<uint64_t>(p.kv.sliding_keep))));
  o.row(fmt::format("one sequence of {} tokens", group_digits(p.in.max_model_len)), gigabytes(p.kv_bytes_per_seq));

  const int tp = p.in.tensor_parallel_size;
  o.section(fmt::format("Memory plan{}: --max-num-seqs {}, --max-model-len {}, canvas {}",
                        tp > 1 ? fmt::format(" per GPU (--tensor-parallel-size {})", tp) : std::string(), p.in.max_num_seqs,
                        group_digits(p.in.max_model_len), p.canvas_length));
  if (tp > 1)
    o.line(fmt::format("(each of the {} GPUs: 1/{} of the heads, MLP widths, experts and vocabulary; norms and router "
                       "replicated; KV heads split or replicated)", tp, tp));
  const bool budget = !r.gpu_memory_source.empty();
  if (budget)
    o.row("GPU budget", fmt::format("{:.3f} GB ({}) × {} = {}", p.in.device_bytes / 1e9, r.gpu_memory_source,
                                    p.in.gpu_memory_utilization, gigabytes(p.budget_bytes)));
  else
    o.row("GPU budget",
          "none: no GPU is visible (--gpu-memory-bytes BYTES plans for a card of that size, e.g. 80e9)");
  o.row(r.config.quant.quantized() ? "weights (on the GPU)" : "weights (bf16)", gigabytes(p.weight_bytes));
  o.row(fmt::format("work buffers, {} seqs", p.in.max_num_seqs), gigabytes(p.work_bytes_all_seqs));
  o.line(fmt::format("  (per sequence: logits [{}, {}] + soft embeddings [{}, {}], bf16)", p.canvas_length, t.vocab_size / tp,
                     p.canvas_length, t.hidden_size));
  o.row("activation workspace", gigabytes(p.workspace_bytes));
  o.row("  activations", fmt::format("{}: {} tokens per step × {} bytes of one layer's live bf16 intermediates",
                                     gigabytes(p.activation_bytes), group_digits(static_cast<uint64_t>(p.step_tokens)),
                                     group_digits(p.activation_bytes_per_token)));
  o.row("  attention key splits", fmt::format("{}: flash attention's fp32 partials, {} splits at most",
                                              gigabytes(p.attention_split_bytes), workspace_bounds::kFlashMaxAutoSplits));
  o.row("  sampler", fmt::format("{}: one launch over {} canvases", gigabytes(p.sampler_bytes),
                                 std::min(p.in.max_num_seqs, workspace_bounds::kSamplerMaxBatch)));
  if (p.fp8_activation_bytes > 0)
    o.row("  FP8 activations", fmt::format("{}: W8A8's per-token E4M3 input copies (FP8-dynamic)", gigabytes(p.fp8_activation_bytes)));
  o.row("  reserve", fmt::format("{}: routing buffers, small tensors, the per-item attention path", gigabytes(p.reserve_bytes)));
  o.row("  allocator rounding", fmt::format("{}: {} live blocks × a 2 MiB granule", gigabytes(p.rounding_bytes), kRoundingBlocks));
  o.row("step ceiling", fmt::format("{}: work buffers + activation workspace, what steps may hold in the GPU allocator",
                                    gigabytes(p.step_ceiling_bytes)));
  if (p.graph_pool_bytes > 0)
    o.row("CUDA graph pool", fmt::format("{}: the recorded denoising steps' memory, a step of {} canvases (--enforce-eager: none)",
                                         gigabytes(p.graph_pool_bytes), p.in.max_num_seqs));
  o.row("runtime reserve", fmt::format("{}: outside the allocator (kernels loaded on first use{})", gigabytes(p.runtime_reserve_bytes),
                                       p.fp8_activation_bytes > 0 ? "; the W8A8 GEMM's workspace" : ""));
  if (budget) {
    o.row("KV pool",
          fmt::format("{}: {} full-attention pages ({} tokens) + {} sliding pages", gigabytes(p.pool.bytes),
                      group_digits(static_cast<uint64_t>(p.pool.pages[full])),
                      group_digits(static_cast<uint64_t>(p.pool.full_tokens)),
                      group_digits(static_cast<uint64_t>(p.pool.pages[sliding]))));
    o.row("KV pool rounding", gigabytes(p.pool_rounding_bytes));
    o.row("total", gigabytes(p.total_bytes));
    o.row("verdict",
          fmt::format("{}; the pool holds {} sequences of {} tokens at once (shorter ones: more)",
                      p.fits ? "fits" : "does not fit", group_digits(static_cast<uint64_t>(p.full_len_seqs)),
                      group_digits(p.in.max_model_len)));
  } else {
    o.row("total without the KV pool", gigabytes(p.total_bytes));
  }

  o.section("Validation");
  o.row("method", r.validation.method);
  if (r.validation.ok()) {
    o.row("result", "OK");
  } else {
    o.row("result", fmt::format("{} problem(s)", r.validation.problems.size()));
    for (const auto& pr : r.validation.problems) o.line("- " + pr);
  }
  for (const auto& w : r.validation.warnings) o.row("warning", w);
  return o.str();
}

Json inspect_report_json(const InspectReport& r) {
  const ModelConfig& c = r.config;
  const TextConfig& t = c.text;
  const GenerationConfig& g = r.generation;
  const MemoryPlan& p = r.plan;
  Json j;
  j["model_dir"] = r.model_dir;
  j["model_type"] = "diffusion_gemma";
  j["text_model_type"] = r.text_model_type;
  j["architectures"] = r.architectures;
  j["dtype"] = c.dtype;
  j["quantization"] = c.quant.quantized() ? Json{{"method", quant_method_name(c.quant.method)}, {"summary", c.quant.summary}}
                                          : Json(nullptr);
  Json lf = Json::object();
  for (const auto& [name, n] : r.checkpoint.linear_formats) lf[name] = n;
  j["linear_formats"] = lf;
  j["has_vision_config"] = c.has_vision;
  j["load_format"] = r.load_format;
  j["load_format_note"] = r.load_format_note;

  Json layers = Json::array();
  for (const auto& lg : r.layer_groups)
    layers.push_back({{"type", layer_type_name(lg.type)}, {"head_dim", lg.head_dim}, {"num_kv_heads", lg.num_kv_heads},
                      {"k_eq_v", lg.k_eq_v}, {"layers", lg.layers}});
  auto rope_json = [](const RopeParams& rp) {
    return Json{{"rope_type", rp.type == RopeType::kDefault ? "default" : "proportional"}, {"rope_theta", rp.theta},
                {"partial_rotary_factor", rp.partial_rotary_factor}};
  };
  j["text_config"] = {
      {"vocab_size", t.vocab_size}, {"hidden_size", t.hidden_size}, {"num_hidden_layers", t.num_hidden_layers},
      {"num_attention_heads", t.num_attention_heads}, {"layer_pattern", r.layer_pattern}, {"full_attention_layers", r.full_layers},
      {"layer_groups", layers}, {"sliding_window", t.sliding_window}, {"intermediate_size", t.intermediate_size},
      {"num_experts", t.num_experts}, {"top_k_experts", t.top_k_experts}, {"moe_intermediate_size", t.moe_intermediate_size},
      {"self_conditioning_size", t.self_conditioning_size}, {"final_logit_softcapping", t.final_logit_softcapping},
      {"rms_norm_eps", t.rms_norm_eps}, {"max_position_embeddings", t.max_position_embeddings},
      {"rope_sliding", rope_json(t.rope_sliding)}, {"rope_full", rope_json(t.rope_full)},
      {"pad_token_id", t.pad_token_id}, {"bos_token_id", t.bos_token_id}, {"eos_token_id", t.eos_token_ids}};
  j["canvas_length"] = c.canvas_length;
  j["eos_token_id"] = c.eos_token_ids;
  j["generation_config"] = {{"source", r.generation_config_file ? "generation_config.json" : "defaults"},
                            {"max_denoising_steps", g.max_denoising_steps}, {"entropy_bound", g.entropy_bound},
                            {"t_min", g.t_min}, {"t_max", g.t_max}, {"stability_threshold", g.stability_threshold},
                            {"confidence_threshold", g.confidence_threshold}, {"max_new_tokens", g.max_new_tokens},
                            {"eos_token_id", g.eos_token_ids}};
  Json groups = Json::object();
  for (int i = 0; i < 8; ++i) groups[weight_group_name(static_cast<WeightGroup>(i))] = r.params.by_group[i];
  j["parameters"] = {{"total", r.params.total},
                     {"vision", r.params.vision},
                     {"active_per_token", r.params.active_per_token},
                     {"by_group", groups}};
  Json dt = Json::object();
  for (const auto& [name, d] : r.bytes_by_dtype) dt[name] = {{"bytes", d.bytes}, {"tensors", d.tensors}};
  j["bytes_by_dtype"] = dt;
  if (r.checkpoint.present) {
    const CheckpointSummary& s = r.checkpoint;
    j["checkpoint"] = {{"files", s.files}, {"tensors", s.tensors}, {"total_bytes", s.total_bytes},
                       {"text_tensors", s.text_tensors}, {"encoder_copies", s.encoder_copies},
                       {"vision_tensors", s.vision_tensors}, {"vision_bytes", s.vision_bytes},
                       {"lm_head", s.lm_head}, {"unexpected", s.unexpected}};
  } else {
    j["checkpoint"] = nullptr;
  }
  j["kv_cache"] = {{"page_tokens", p.kv.page_size},
                   {"bytes_per_page_full", p.kv.bytes_per_page[static_cast<int>(KvGroup::kFull)]},
                   {"bytes_per_page_sliding", p.kv.bytes_per_page[static_cast<int>(KvGroup::kSliding)]},
                   {"sliding_keep_tokens", p.kv.sliding_keep},
                   {"prefill_chunk_tokens", p.prefill_chunk},
                   {"bytes_per_sequence", p.kv_bytes_per_seq}};
  j["memory_plan"] = {
      {"tensor_parallel_size", p.in.tensor_parallel_size},
      {"max_model_len", p.in.max_model_len},
      {"max_num_seqs", p.in.max_num_seqs},
      {"canvas_length", p.canvas_length},
      {"max_num_batched_tokens", p.max_num_batched_tokens},
      {"encode_tokens", p.encode_tokens},
      {"step_tokens", p.step_tokens},
      {"gpu_memory_bytes", r.gpu_memory_source.empty() ? Json(nullptr) : Json(p.in.device_bytes)},
      {"gpu_memory_source", r.gpu_memory_source.empty() ? Json(nullptr) : Json(r.gpu_memory_source)},
      {"gpu_memory_utilization", p.in.gpu_memory_utilization},
      {"budget_bytes", p.budget_bytes},
      {"weight_bytes", p.weight_bytes},
      {"work_bytes_per_sequence", p.work_bytes_per_seq},
      {"work_bytes", p.work_bytes_all_seqs},
      {"activation_bytes_per_token", p.activation_bytes_per_token},
      {"activation_bytes", p.activation_bytes},
      {"attention_split_bytes", p.attention_split_bytes},
      {"sampler_bytes", p.sampler_bytes},
      {"fp8_activation_bytes", p.fp8_activation_bytes},
      {"workspace_reserve_bytes", p.reserve_bytes},
      {"rounding_bytes", p.rounding_bytes},
      {"workspace_bytes", p.workspace_bytes},
      {"step_ceiling_bytes", p.step_ceiling_bytes},
      {"graph_pool_bytes", p.graph_pool_bytes},
      {"runtime_reserve_bytes", p.runtime_reserve_bytes},
      {"kv_pool_rounding_bytes", p.pool_rounding_bytes},
      {"kv_budget_bytes", p.kv_budget_bytes},
      {"kv_pool_bytes", p.pool.bytes},
      {"kv_pages_full", p.pool.pages[static_cast<int>(KvGroup::kFull)]},
      {"kv_pages_sliding", p.pool.pages[static_cast<int>(KvGroup::kSliding)]},
      {"kv_pool_tokens", p.pool.full_tokens},
      {"max_model_len_sequences", p.full_len_seqs},
      {"total_bytes", p.total_bytes},
      {"fits", r.gpu_memory_source.empty() ? Json(nullptr) : Json(p.fits)}};
  j["validation"] = {{"method", r.validation.method}, {"ok", r.validation.ok()}, {"loaded", r.validation.loaded},
                     {"load_error", r.validation.load_error}, {"problems", r.validation.problems},
                     {"warnings", r.validation.warnings}};
  return j;
}

}  // namespace dgemma
