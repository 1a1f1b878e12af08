// The `dgemma inspect` report: parameter counts of the released 26B-A4B shape worked out by hand from
// docs/MODEL.md §1.2/§2.2, the KV and memory plan, the tiny fixtures' checkpoints (OK, vision tensors,
// bytes by dtype read back from the files themselves), a broken checkpoint listing all its problems,
// and clear errors for bad model directories and options.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "../reference_data.h"
#include "backend/device_memory.h"
#include "cli/inspect_report.h"
#include "model/safetensors.h"
#include "util/error.h"
#include "util/json.h"
#include "util/mmap_file.h"

namespace dgemma {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kRef26B = testing::reference_path("configs/diffusiongemma-26b-a4b");
const std::string kTinyA = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model";
const std::string kTinyB = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_b/model";

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() / fmt::format("dgemma_insp_{}_{}_{}", ::getpid(), counter++, std::random_device{}());
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  fs::path operator/(const std::string& s) const { return path_ / s; }

 private:
  fs::path path_;
};

InspectOptions dummy_26b_options(int max_num_seqs = 4, int64_t max_model_len = 8192) {
  InspectOptions o;
  o.model_dir = kRef26B;
  o.load_format = "dummy";
  o.max_num_seqs = max_num_seqs;
  o.max_model_len = max_model_len;
  o.gpu_memory_bytes = 141e9;  // one H200
  return o;
}
InspectReport dummy_26b(int max_num_seqs = 4, int64_t max_model_len = 8192) {
  return build_inspect_report(dummy_26b_options(max_num_seqs, max_model_len));
}

std::string lines(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + "\n";
  return out;
}

int64_t by_group(const InspectReport& r, WeightGroup g) { return r.params.by_group[static_cast<int>(g)]; }

// ---- the released shape, by hand (docs/MODEL.md §1.2 / §2.2) -----------------------------------------

// H = 2816, V = 262144, 30 layers: 25 sliding (16 q heads × 256, 8 KV heads × 256, with v_proj) and
// 5 full (16 q heads × 512, 2 KV heads × 512, no v_proj); dense MLP 2112; 128 experts × 704; SC 2112.
constexpr int64_t kH = 2816, kV = 262144;
constexpr int64_t kEmbedding = kV * kH;                                         // embed_tokens (tied LM head)
constexpr int64_t kAttnSliding = 4096 * kH + 2048 * kH + 2048 * kH + kH * 4096;  // q, k, v, o
constexpr int64_t kAttnFull = 8192 * kH + 1024 * kH + kH * 8192;                // q, k, o (K=V: no v)
constexpr int64_t kAttention = 25 * kAttnSliding + 5 * kAttnFull;
constexpr int64_t kDense = 30 * (3 * 2112 * kH);                                // gate, up, down
constexpr int64_t kRouter = 30 * (128 * kH + kH + 128);                         // proj, scale, per_expert_scale
constexpr int64_t kExperts = 30 * (128 * (1408 * kH + kH * 704));               // gate_up, down
// 7 hidden-size norms per layer (input, post-attn, pre-ff, post-ff1, pre-ff2, post-ff2, post-ff)
// + q_norm and k_norm of the layer's head dim; + the final norm.
constexpr int64_t kNorms = 25 * (7 * kH + 2 * 256) + 5 * (7 * kH + 2 * 512) + kH;
constexpr int64_t kScalars = 30;                                                // layer_scalar [1]
constexpr int64_t kSelfCond = 3 * 2112 * kH + kH;                               // gate, up, down + pre_norm
constexpr int64_t kTotal = kEmbedding + kAttention + kDense + kRouter + kExperts + kNorms + kScalars + kSelfCond;
// Active per token: all but the experts (top 8 of 128) and the self-conditioning MLP.
constexpr int64_t kActive = kEmbedding + kAttention + kDense + kRouter + kExperts / 128 * 8 + kNorms + kScalars;

TEST(InspectReport, ParameterCountsOf26BMatchTheHandCount) {
  DG_NEED_REFERENCE(kRef26B + "/config.json");
  const InspectReport r = dummy_26b();
  EXPECT_EQ(by_group(r, WeightGroup::kEmbedding), kEmbedding);
  EXPECT_EQ(by_group(r, WeightGroup::kAttention), kAttention);
  EXPECT_EQ(by_group(r, WeightGroup::kDenseMlp), kDense);
  EXPECT_EQ(by_group(r, WeightGroup::kRouter), kRouter);
  EXPECT_EQ(by_group(r, WeightGroup::kExperts), kExperts);
  EXPECT_EQ(by_group(r, WeightGroup::kNorm), kNorms);
  EXPECT_EQ(by_group(r, WeightGroup::kScalar), kScalars);
  EXPECT_EQ(by_group(r, WeightGroup::kSelfConditioning), kSelfCond);
  EXPECT_EQ(r.params.total, kTotal);
  EXPECT_EQ(r.params.total, 25'250'986'782);
  EXPECT_EQ(r.params.active_per_token, kActive);

  // docs/MODEL.md §1.2: experts 22.84 B, attention 1.11 B, dense 0.54 B, embedding 0.74 B.
  EXPECT_EQ(std::round(kExperts / 1e7) / 100, 22.84);
  EXPECT_EQ(std::round(kAttention / 1e7) / 100, 1.11);
  EXPECT_EQ(std::round(kDense / 1e7) / 100, 0.54);
  EXPECT_EQ(std::round(kEmbedding / 1e7) / 100, 0.74);
  // docs/MODEL.md §1.2, "25.2 B": the count is 25.25 B (25.2x B); without DiffusionGemma's self-conditioning
  // MLP — the Gemma-4 trunk, published as "25.2B total" — it rounds to 25.2 B.
  EXPECT_GE(kTotal, 25'200'000'000);
  EXPECT_LT(kTotal, 25'300'000'000);
  EXPECT_EQ(std::round(kTotal / 1e7) / 100, 25.25);
  EXPECT_EQ(std::round((kTotal - kSelfCond) / 1e8) / 10, 25.2);
  // Active per token: 3.82 B (Gemma-4 26B-A4B is published as "3.8B active").
  EXPECT_EQ(std::round(kActive / 1e8) / 10, 3.8);
  EXPECT_EQ(std::round(kActive / 1e7) / 100, 3.82);
}

TEST(InspectReport, ConfigSummaryOf26B) {
  DG_NEED_REFERENCE(kRef26B + "/config.json");
  const InspectReport r = dummy_26b();
  EXPECT_EQ(r.load_format, "dummy");
  EXPECT_FALSE(r.checkpoint.present);
  ASSERT_EQ(r.architectures.size(), 1u);
  EXPECT_EQ(r.architectures[0], "DiffusionGemmaForBlockDiffusion");
  EXPECT_EQ(r.layer_pattern, "(5×sliding, 1×full) ×5");
  EXPECT_EQ(r.full_layers, (std::vector<int>{5, 11, 17, 23, 29}));
  ASSERT_EQ(r.layer_groups.size(), 2u);
  EXPECT_EQ(r.layer_groups[0].type, LayerType::kSliding);
  EXPECT_EQ(r.layer_groups[0].layers.size(), 25u);
  EXPECT_EQ(r.layer_groups[0].num_kv_heads, 8);
  EXPECT_EQ(r.layer_groups[0].head_dim, 256);
  EXPECT_FALSE(r.layer_groups[0].k_eq_v);
  EXPECT_EQ(r.layer_groups[1].type, LayerType::kFull);
  EXPECT_EQ(r.layer_groups[1].layers.size(), 5u);
  EXPECT_EQ(r.layer_groups[1].num_kv_heads, 2);
  EXPECT_EQ(r.layer_groups[1].head_dim, 512);
  EXPECT_TRUE(r.layer_groups[1].k_eq_v);
  EXPECT_TRUE(r.generation_config_file);
  EXPECT_EQ(r.generation.max_denoising_steps, 48);
  EXPECT_EQ(r.generation.entropy_bound, 0.1);
  EXPECT_EQ(r.generation.eos_token_ids, (std::vector<int32_t>{1, 106, 50}));
  EXPECT_TRUE(r.validation.ok());
  // Dummy: bytes are bf16 x parameters.
  ASSERT_EQ(r.bytes_by_dtype.size(), 1u);
  EXPECT_EQ(r.bytes_by_dtype.at("BF16").bytes, static_cast<uint64_t>(kTotal) * 2);

  const std::string text = format_inspect_text(r);
  EXPECT_THAT(text, HasSubstr("25.251 B  (25,250,986,782)"));
  EXPECT_THAT(text, HasSubstr("22.838 B  (22,837,985,280)"));
  EXPECT_THAT(text, HasSubstr("5, 11, 17, 23, 29"));
  EXPECT_THAT(text, HasSubstr("fits"));
  const Json j = inspect_report_json(r);
  EXPECT_EQ(j["parameters"]["total"].get<int64_t>(), kTotal);
  EXPECT_EQ(j["parameters"]["by_group"]["experts"].get<int64_t>(), kExperts);
  EXPECT_EQ(j["parameters"]["active_per_token"].get<int64_t>(), kActive);
  EXPECT_EQ(j["kv_cache"]["bytes_per_page_full"].get<uint64_t>(), 20480u * 256);
  EXPECT_TRUE(j["memory_plan"]["fits"].get<bool>());
  EXPECT_TRUE(j["validation"]["ok"].get<bool>());
  // The JSON text parses back (it is what --json prints).
  EXPECT_EQ(parse_json(j.dump(2), "report", false), j);
}

TEST(InspectReport, KvAndMemoryPlanOf26B) {
  DG_NEED_REFERENCE(kRef26B + "/config.json");
  const InspectReport r = dummy_26b(4, 8192);
  const MemoryPlan& p = r.plan;
  // Pages of 256 tokens (the canvas). Full layers: 5 layers × (K, V) × 2 KV heads × 512 × 2 bytes per
  // token; sliding layers: 25 × 2 × 8 heads × 256 × 2 bytes per token.
  const uint64_t full_page = 20480ull * 256, sliding_page = 204800ull * 256;
  EXPECT_EQ(p.kv.bytes_per_page[static_cast<int>(KvGroup::kFull)], full_page);
  EXPECT_EQ(p.kv.bytes_per_page[static_cast<int>(KvGroup::kSliding)], sliding_page);
  EXPECT_EQ(p.prefill_chunk, 2048);
  EXPECT_EQ(p.max_num_batched_tokens, 4 * 2 * 256 + 2048);
  // A sequence of 8192 tokens: 32 full pages and a ring of 7 sliding pages (window-1 and a committed
  // canvas, partial pages at both ends).
  EXPECT_EQ(p.kv_bytes_per_seq, 32 * full_page + 7 * sliding_page);
  EXPECT_EQ(p.weight_bytes, static_cast<uint64_t>(kTotal) * 2);
  EXPECT_EQ(p.work_bytes_per_seq, 256ull * 262144 * 2 + 256ull * 2816 * 2);
  EXPECT_EQ(p.budget_bytes, 126'900'000'000ull);
  // Activations per token: 6 x 2816 + 3 x 8192 (the fused q|k|v output's q part, q, attention out: 16
  // heads x 512) + 4 x 2048 (its k and v parts, new k and v: 8 heads x 256) + 3 x 2112 (MLP) + 8 x
  // (2 x 2816 + 3 x 704) (routed slots) + 3 x 2112 (SC MLP) = 124,288 bf16 = 248,576 bytes, + 128
  // experts x 8 bytes of f32 router logits and probabilities.
  EXPECT_EQ(p.activation_bytes_per_token, 249'600u);
  EXPECT_EQ(p.activation_bytes, 4096u * 249'600u);  // 1,022,361,600
  // Flash attention: 8 splits x 4096 tokens x 16 heads = 524,288 rows: (max, sum) 4,194,304 bytes +
  // 512-wide fp32 partials 1,073,741,824.
  EXPECT_EQ(p.attention_split_bytes, 1'077'936'128u);
  // Sampler over 4 canvases: 1024 rows x 16 vocabulary slices = 16,384 cells x 292 = 4,784,128; 1024 x
  // 8 = 8,192; 4 z tables of 1 MiB = 4,194,304; 64-row histograms 16,777,216; alignment 1,792.
  EXPECT_EQ(p.sampler_bytes, 25'765'632u);
  // + the 512 MiB reserve + 48 blocks x 2 MiB of rounding = 2,763,597,568.
  EXPECT_EQ(p.workspace_bytes, 2'763'597'568u);
  EXPECT_EQ(p.step_ceiling_bytes, 4 * p.work_bytes_per_seq + p.workspace_bytes);
  EXPECT_EQ(p.pool_rounding_bytes, 60u * (2u << 20)) << "30 layers x (K, V)";
  EXPECT_EQ(p.runtime_reserve_bytes, kRuntimeReserveBytes);
  // The CUDA graph pool: a step of 4 canvases' workspace: 1,024 tokens x 249,600 = 255,590,400 of
  // activations + flash's 8 splits x 1,024 tokens x 16 heads x (512 x 4 + 8) bytes = 269,484,032 + the
  // sampler's 25,765,632 + the rounding's 100,663,296.
  EXPECT_EQ(p.graph_pool_bytes, 651'503'360u);
  // The pool takes what the rest leaves: sliding pages for every sequence's ring plus one step's
  // chunks, full pages with the remainder.
  EXPECT_EQ(p.kv_budget_bytes, p.budget_bytes - p.weight_bytes - 4 * p.work_bytes_per_seq - p.workspace_bytes -
                                   p.graph_pool_bytes - p.pool_rounding_bytes - p.runtime_reserve_bytes);
  EXPECT_EQ(p.pool.pages[static_cast<int>(KvGroup::kSliding)], 4 * 7 + 4096 / 256);
  EXPECT_EQ(p.pool.pages[static_cast<int>(KvGroup::kFull)],
            static_cast<int64_t>((p.kv_budget_bytes - 44 * sliding_page) / full_page));
  EXPECT_EQ(p.full_len_seqs, p.pool.pages[static_cast<int>(KvGroup::kFull)] / 32);
  EXPECT_LE(p.total_bytes, p.budget_bytes);
  EXPECT_TRUE(p.fits);
  // Each term is printed, and in the JSON.
  const std::string text = format_inspect_text(r);
  EXPECT_THAT(text, HasSubstr("1.078 GB  (1,077,936,128 bytes): flash attention's fp32 partials, 8 splits at most"));
  EXPECT_THAT(text, HasSubstr("0.026 GB  (25,765,632 bytes): one launch over 4 canvases"));
  EXPECT_THAT(text, HasSubstr("0.101 GB  (100,663,296 bytes): 48 live blocks × a 2 MiB granule"));
  EXPECT_THAT(text, HasSubstr("1.022 GB  (1,022,361,600 bytes): 4,096 tokens per step × 249,600 bytes"));
  EXPECT_THAT(text, HasSubstr("step ceiling                   3.306 GB  (3,306,235,648 bytes)"));
  EXPECT_THAT(text, HasSubstr("runtime reserve                0.268 GB  (268,435,456 bytes)"));
  EXPECT_THAT(text, HasSubstr("KV pool rounding               0.126 GB  (125,829,120 bytes)"));
  EXPECT_THAT(text, HasSubstr("CUDA graph pool                0.652 GB  (651,503,360 bytes)"));
  const Json mj = inspect_report_json(r)["memory_plan"];
  EXPECT_EQ(mj["attention_split_bytes"].get<uint64_t>(), 1'077'936'128u);
  EXPECT_EQ(mj["sampler_bytes"].get<uint64_t>(), 25'765'632u);
  EXPECT_EQ(mj["step_ceiling_bytes"].get<uint64_t>(), p.step_ceiling_bytes);
  EXPECT_EQ(mj["workspace_bytes"].get<uint64_t>(), 2'763'597'568u);
  EXPECT_EQ(mj["graph_pool_bytes"].get<uint64_t>(), 651'503'360u);
  // --enforce-eager: no graph pool, the KV pool gets it.
  InspectOptions eager = dummy_26b_options(4, 8192);
  eager.enforce_eager = true;
  const MemoryPlan pe = build_inspect_report(eager).plan;
  EXPECT_EQ(pe.graph_pool_bytes, 0u);
  EXPECT_EQ(pe.kv_budget_bytes, p.kv_budget_bytes + p.graph_pool_bytes);
  // 64 sequences at --max-model-len 262144 on one H200: the pool holds 64 requests of 8k tokens
  // (--enforce-eager; with CUDA graphs their pool of a 64-canvas step takes ~8.6 GB of it: 57 of them)
  // although 64 full contexts would need ~340 GB.
  InspectOptions big;
  big.model_dir = kRef26B;
  big.load_format = "dummy";
  big.max_num_seqs = 64;
  big.max_model_len = 262144;
  big.gpu_memory_bytes = 141e9;
  big.enforce_eager = true;
  const MemoryPlan q = build_inspect_report(big).plan;
  EXPECT_TRUE(q.fits);
  EXPECT_GE(q.pool.full_tokens, 64 * 8192);
  big.enforce_eager = false;
  const MemoryPlan qg = build_inspect_report(big).plan;
  EXPECT_TRUE(qg.fits);
  EXPECT_GE(qg.pool.full_tokens, 57 * 8192);
  EXPECT_EQ(q.full_len_seqs, q.pool.pages[static_cast<int>(KvGroup::kFull)] / 1024);
  // Weights alone do not fit in 40 GB.
  InspectOptions small = big;
  small.max_num_seqs = 4;
  small.gpu_memory_bytes = 40e9;
  InspectReport with_small = build_inspect_report(small);
  EXPECT_FALSE(with_small.plan.fits);
  EXPECT_THAT(format_inspect_text(with_small), HasSubstr("does not fit"));
  // An explicit --kv-cache-memory is the pool's size.
  InspectOptions fixed = big;
  fixed.max_num_seqs = 4;
  fixed.kv_cache_memory = 20ull << 30;
  const MemoryPlan f = build_inspect_report(fixed).plan;
  EXPECT_LE(f.pool.bytes, 20ull << 30);
  EXPECT_GT(f.pool.bytes, (20ull << 30) - full_page);
}

// --tensor-parallel-size N: the plan of one GPU, by hand. Split by N: the embedding, q / o, the dense
// and self-conditioning MLPs, the experts, the sliding layers' 8 KV heads; the full layers' 2 KV heads
// split at N = 2 and replicated (one per GPU) at N = 4; router, norms and scalars on every GPU.
TEST(InspectReport, PerGpuPlanOf26BUnderTensorParallelism) {
  DG_NEED_REFERENCE(kRef26B + "/config.json");
  InspectOptions o;
  o.model_dir = kRef26B;
  o.load_format = "dummy";
  o.max_model_len = 8192;
  o.gpu_memory_bytes = 141e9;
  const MemoryPlan one = build_inspect_report(o).plan;
  for (int64_t n : {2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(n));
    o.tensor_parallel_size = static_cast<int>(n);
    const InspectReport r = build_inspect_report(o);
    const MemoryPlan& p = r.plan;
    const int64_t full_kv = 1024 * kH / 2;  // 2 KV heads: one per GPU at N = 2 and at N = 4
    const int64_t attn = 25 * (4096 * kH / n + 2 * (2048 * kH / n) + kH * 4096 / n) + 5 * (8192 * kH / n + full_kv + kH * 8192 / n);
    const int64_t want = kEmbedding / n + attn + kDense / n + kRouter + kExperts / n + kNorms + kScalars + 3 * 2112 * kH / n + kH;
    EXPECT_EQ(p.weight_bytes, static_cast<uint64_t>(want) * 2);
    // Its vocabulary columns of the logits, the soft embeddings, and the logits over the whole
    // vocabulary it samples (a GPU rank gathers the vocabulary: DiffusionGemma::gathers_vocabulary).
    EXPECT_EQ(p.work_bytes_per_seq, 256ull * (262144 / n) * 2 + 256ull * 2816 * 2 + 256ull * 262144 * 2);
    const uint64_t full_page = 20480ull * 256 / 2;  // one of the 2 full-layer KV heads per GPU
    EXPECT_EQ(p.kv.bytes_per_page[static_cast<int>(KvGroup::kFull)], full_page);
    EXPECT_EQ(p.kv.bytes_per_page[static_cast<int>(KvGroup::kSliding)], 204800ull * 256 / n);
    EXPECT_GT(p.pool.full_tokens, one.pool.full_tokens) << "a GPU holds more tokens of its heads";
    EXPECT_GT(p.graph_pool_bytes, 0u) << "every GPU records the denoising steps as CUDA graphs";
    EXPECT_THAT(format_inspect_text(r), HasSubstr("per GPU (--tensor-parallel-size " + std::to_string(n) + ")"));
    EXPECT_EQ(inspect_report_json(r)["memory_plan"]["tensor_parallel_size"].get<int>(), n);
  }
  o.tensor_parallel_size = 3;
  EXPECT_THROW(build_inspect_report(o), Error);
}

TEST(InspectReport, DefaultModelLenAndCanvasOverride) {
  DG_NEED_REFERENCE(kRef26B + "/config.json");
  InspectOptions o;
  o.model_dir = kRef26B;
  o.load_format = "dummy";
  EXPECT_EQ(build_inspect_report(o).plan.in.max_model_len, 262144) << "the model's context, as the engine";
  o.canvas_length = 64;
  const InspectReport r = build_inspect_report(o);
  EXPECT_EQ(r.config.canvas_length, 64);
  EXPECT_EQ(r.plan.kv.page_size, 64);
  EXPECT_EQ(r.plan.work_bytes_per_seq, 64ull * (262144 + 2816) * 2);
  EXPECT_EQ(r.plan.kv_bytes_per_seq, 4096 * 20480ull * 64 + ((1023 + 127) / 64 + 2) * 204800ull * 64);
}

// Without --gpu-memory-bytes the plan is for this machine's GPU; without a GPU it has no budget, so no
// KV pool and no verdict, rather than a card the machine does not have.
TEST(InspectReport, GpuMemoryComesFromTheMachineOrTheFlag) {
  InspectOptions o;
  o.model_dir = kTinyA;
  const InspectReport r = build_inspect_report(o);
  const std::string text = format_inspect_text(r);
  const Json j = inspect_report_json(r);
  if (const auto gpu = cuda_device_memory()) {
    EXPECT_EQ(r.gpu_memory_source, "GPU 0");
    EXPECT_EQ(r.plan.in.device_bytes, *gpu);
    EXPECT_THAT(text, HasSubstr("(GPU 0)"));
  } else {
    EXPECT_EQ(r.gpu_memory_source, "");
    EXPECT_THAT(text, HasSubstr("none: no GPU is visible"));
    EXPECT_THAT(text, HasSubstr("total without the KV pool"));
    EXPECT_THAT(text, ::testing::Not(HasSubstr("verdict")));
    EXPECT_TRUE(j["memory_plan"]["fits"].is_null());
    EXPECT_TRUE(j["memory_plan"]["gpu_memory_bytes"].is_null());
  }
  o.gpu_memory_bytes = 80e9;
  const InspectReport h100 = build_inspect_report(o);
  EXPECT_EQ(h100.gpu_memory_source, "--gpu-memory-bytes");
  EXPECT_EQ(h100.plan.in.device_bytes, 80000000000u);
  EXPECT_THAT(format_inspect_text(h100), HasSubstr("verdict"));
  // The full-attention layers are listed as indices, not read as a count.
  EXPECT_THAT(text, HasSubstr("full-attention layer indices"));
  EXPECT_THAT(text, HasSubstr("(from 0)"));
}

TEST(InspectReport, LayerTypePattern) {
  auto specs = [](std::string s) {
    std::vector<LayerSpec> v;
    for (char ch : s) v.push_back({ch == 'f' ? LayerType::kFull : LayerType::kSliding, 16, 1, ch == 'f'});
    return v;
  };
  EXPECT_EQ(layer_type_pattern(specs("ssfssf")), "(2×sliding, 1×full) ×2");
  EXPECT_EQ(layer_type_pattern(specs("sf")), "1×sliding, 1×full");
  EXPECT_EQ(layer_type_pattern(specs("ssfsf")), "2×sliding, 1×full, 1×sliding, 1×full");
  EXPECT_EQ(layer_type_pattern(specs("ffff")), "(1×full) ×4");
  EXPECT_EQ(layer_type_pattern(specs("f")), "1×full");
}

// ---- the tiny fixtures' real checkpoints --------------------------------------------------------------

// The data section of a single-file checkpoint, measured from the file: size - 8 - header length.
uint64_t data_section_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint8_t len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  return fs::file_size(path) - 8 - n;
}

void check_fixture(const std::string& dir, const std::string& pattern, uint64_t full_load_limit) {
  SCOPED_TRACE(dir);
  InspectOptions o;
  o.model_dir = dir;  // auto: the directory holds model.safetensors
  o.full_load_limit_bytes = full_load_limit;
  const InspectReport r = build_inspect_report(o);
  EXPECT_EQ(r.load_format, "safetensors");
  EXPECT_TRUE(r.validation.ok()) << lines(r.validation.problems);
  EXPECT_EQ(r.validation.loaded, full_load_limit > 0);
  EXPECT_TRUE(r.validation.load_error.empty()) << r.validation.load_error;
  EXPECT_TRUE(r.validation.warnings.empty());
  EXPECT_EQ(r.layer_pattern, pattern);

  // Independent reading of the file.
  const SafetensorsFile f(dir + "/model.safetensors");
  int64_t vision = 0, encoder = 0;
  std::map<std::string, uint64_t> bytes;
  for (const auto& t : f.tensors()) {
    vision += t.name.find("vision") != std::string::npos;
    encoder += t.name.rfind("model.encoder.language_model.", 0) == 0;
    bytes[dtype_name(t.dtype)] += t.nbytes;
  }
  EXPECT_GT(vision, 0);
  EXPECT_EQ(r.checkpoint.vision_tensors, vision);
  EXPECT_EQ(r.checkpoint.encoder_copies, encoder);  // the duplicated layer_scalar buffers
  EXPECT_EQ(encoder, r.config.text.num_hidden_layers);
  EXPECT_EQ(r.checkpoint.tensors, static_cast<int64_t>(f.tensors().size()));
  EXPECT_EQ(r.checkpoint.text_tensors + r.checkpoint.vision_tensors, r.checkpoint.tensors);
  ASSERT_EQ(r.bytes_by_dtype.size(), bytes.size());
  uint64_t sum = 0;
  for (const auto& [name, b] : bytes) {
    EXPECT_EQ(r.bytes_by_dtype.at(name).bytes, b) << name;
    sum += r.bytes_by_dtype.at(name).bytes;
  }
  EXPECT_EQ(sum, data_section_bytes(dir + "/model.safetensors"));
  EXPECT_EQ(sum, r.checkpoint.total_bytes);

  const std::string text = format_inspect_text(r);
  EXPECT_THAT(text, HasSubstr("OK"));
  EXPECT_THAT(text, ::testing::ContainsRegex(fmt::format("vision tensors +{}, ", vision)));
}

TEST(InspectReport, TinyFixturesValidate) {
  check_fixture(kTinyA, "(2×sliding, 1×full) ×2", uint64_t{8} << 30);
  check_fixture(kTinyB, "1×sliding, 1×full", uint64_t{8} << 30);
  // Header-only path (as for checkpoints above the full-load limit).
  check_fixture(kTinyA, "(2×sliding, 1×full) ×2", 0);
  check_fixture(kTinyB, "1×sliding, 1×full", 0);
}

TEST(InspectReport, TinyBPerLayerConfig) {
  InspectOptions o;
  o.model_dir = kTinyB;
  const InspectReport r = build_inspect_report(o);
  // tiny_b: per_layer_config makes layer 1 full with head dim 32 and one KV head, K=V.
  const int64_t P = r.config.canvas_length;
  EXPECT_EQ(r.plan.kv.bytes_per_page[static_cast<int>(KvGroup::kFull)], 2u * 1 * 32 * 2 * P);
  EXPECT_EQ(r.plan.kv.bytes_per_page[static_cast<int>(KvGroup::kSliding)], 2u * 1 * 16 * 2 * P);
  EXPECT_EQ(r.full_layers, (std::vector<int>{1}));
}

// A checkpoint with one tensor missing, one misshaped and one of the wrong dtype: all three listed.
TEST(InspectReport, BrokenCheckpointListsEveryProblem) {
  TempDir dir;
  fs::copy_file(kTinyA + "/config.json", dir / "config.json");
  fs::copy_file(kTinyA + "/generation_config.json", dir / "generation_config.json");
  const SafetensorsFile src(kTinyA + "/model.safetensors");
  const std::string missing = "model.decoder.layers.1.mlp.up_proj.weight";
  const std::string misshaped = "model.decoder.layers.2.self_attn.q_proj.weight";  // [4*32, 64] -> [64, 128]
  const std::string wrong_dtype = "model.decoder.layers.3.router.scale";           // [64] BF16 -> I32
  std::vector<TensorToWrite> out;
  bool saw[3] = {};
  for (const auto& t : src.tensors()) {
    TensorToWrite w{t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
    if (t.name == missing) {
      saw[0] = true;
      continue;
    }
    if (t.name == misshaped) {
      saw[1] = true;
      ASSERT_EQ(t.shape, (std::vector<int64_t>{128, 64}));
      w.shape = {64, 128};
    }
    if (t.name == wrong_dtype) {
      saw[2] = true;
      w.dtype = DType::kI32;
      w.bytes.assign(static_cast<size_t>(t.numel()) * 4, 0);
    }
    out.push_back(std::move(w));
  }
  ASSERT_TRUE(saw[0] && saw[1] && saw[2]);
  write_safetensors((dir / "model.safetensors").string(), out);

  for (uint64_t limit : {uint64_t{8} << 30, uint64_t{0}}) {
    SCOPED_TRACE(limit);
    InspectOptions o;
    o.model_dir = dir.str();
    o.full_load_limit_bytes = limit;
    const InspectReport r = build_inspect_report(o);
    ASSERT_EQ(r.validation.problems.size(), 3u) << lines(r.validation.problems);
    EXPECT_THAT(r.validation.problems[0], HasSubstr("missing tensor " + missing));
    EXPECT_THAT(r.validation.problems[1], HasSubstr(misshaped + " in "));
    EXPECT_THAT(r.validation.problems[1], HasSubstr("has shape [64, 128]; expected [128, 64]"));
    EXPECT_THAT(r.validation.problems[2], HasSubstr(wrong_dtype + " in "));
    EXPECT_THAT(r.validation.problems[2], HasSubstr("has dtype I32"));
    EXPECT_FALSE(r.validation.ok());
    if (limit > 0) {
      // load_weights ran on the CPU backend and refused the same three tensors.
      EXPECT_TRUE(r.validation.loaded);
      EXPECT_THAT(r.validation.load_error, HasSubstr("3 problem(s)"));
      for (const auto& name : {missing, misshaped, wrong_dtype}) EXPECT_THAT(r.validation.load_error, HasSubstr(name));
    } else {
      EXPECT_FALSE(r.validation.loaded);
    }
    // I32 bytes are counted under their own dtype.
    EXPECT_EQ(r.bytes_by_dtype.at("I32").tensors, 1);
    EXPECT_EQ(r.bytes_by_dtype.at("I32").bytes, 64u * 4);
    const std::string text = format_inspect_text(r);
    EXPECT_THAT(text, HasSubstr("3 problem(s)"));
    EXPECT_THAT(text, HasSubstr(missing));
    EXPECT_FALSE(inspect_report_json(r)["validation"]["ok"].get<bool>());
  }
}

// ---- errors ---------------------------------------------------------------------------------------------

template <typename F>
void expect_error(F f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(kind)) << e.what();
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

InspectReport inspect(const std::string& dir, std::function<void(InspectOptions&)> tweak = {}) {
  InspectOptions o;
  o.model_dir = dir;
  if (tweak) tweak(o);
  return build_inspect_report(o);
}

TEST(InspectReport, ClearErrors) {
  TempDir dir;
  expect_error([&] { inspect(dir.str() + "/nope"); }, ErrorKind::kNotFound, "no such model directory");
  expect_error([&] { inspect(dir.str()); }, ErrorKind::kNotFound, "no config.json");
  expect_error([&] { inspect(""); }, ErrorKind::kInvalidArgument, "MODEL");
  {
    std::ofstream((dir / "file.txt").string()) << "x";
    expect_error([&] { inspect((dir / "file.txt").string()); }, ErrorKind::kInvalidArgument, "not a directory");
  }
  std::ofstream((dir / "config.json").string()) << "{\"model_type\": \"diffusion_gemma\", ";
  expect_error([&] { inspect(dir.str()); }, ErrorKind::kInvalidFile, "config.json");

  // An inconsistent config: top_k_experts > num_experts.
  Json cfg = parse_json(read_text_file(kTinyA + "/config.json"), "tiny_a", true);
  cfg["text_config"]["top_k_experts"] = 9;
  std::ofstream((dir / "config.json").string(), std::ios::trunc) << cfg.dump();
  expect_error([&] { inspect(dir.str()); }, ErrorKind::kInvalidFile, "top_k_experts (9) exceeds num_experts (8)");

  // A config-only directory: auto falls back to dummy; safetensors is an error.
  cfg["text_config"]["top_k_experts"] = 2;
  std::ofstream((dir / "config.json").string(), std::ios::trunc) << cfg.dump();
  const InspectReport r = inspect(dir.str());
  EXPECT_EQ(r.load_format, "dummy");
  EXPECT_FALSE(r.generation_config_file);
  EXPECT_EQ(r.generation.max_denoising_steps, 48);
  expect_error([&] { inspect(dir.str(), [](InspectOptions& o) { o.load_format = "safetensors"; }); }, ErrorKind::kNotFound,
               "safetensors");

  // Bad options.
  expect_error([&] { inspect(kTinyA, [](InspectOptions& o) { o.load_format = "gguf"; }); }, ErrorKind::kInvalidArgument,
               "--load-format");
  expect_error([&] { inspect(kTinyA, [](InspectOptions& o) { o.max_model_len = 5000; }); }, ErrorKind::kInvalidArgument,
               "max_position_embeddings 4096");
  expect_error([&] { inspect(kTinyA, [](InspectOptions& o) { o.max_num_seqs = 0; }); }, ErrorKind::kInvalidArgument,
               "--max-num-seqs");
  expect_error([&] { inspect(kTinyA, [](InspectOptions& o) { o.gpu_memory_utilization = 1.5; }); },
               ErrorKind::kInvalidArgument, "--gpu-memory-utilization");
  expect_error([&] { inspect(kTinyA, [](InspectOptions& o) { o.gpu_memory_bytes = -1; }); }, ErrorKind::kInvalidArgument,
               "--gpu-memory-bytes");
  expect_error([&] { inspect(kTinyA, [](InspectOptions& o) { o.canvas_length = 4096; }); }, ErrorKind::kInvalidFile,
               "canvas_length 4096 must be smaller than max_position_embeddings 4096");
  expect_error([&] { inspect(kTinyA, [](InspectOptions& o) { o.canvas_length = 0; }); }, ErrorKind::kInvalidArgument,
               "--canvas-length");

  // A truncated safetensors file is an error naming the file.
  fs::copy_file(kTinyA + "/generation_config.json", dir / "generation_config.json");
  std::ofstream((dir / "model.safetensors").string(), std::ios::binary) << std::string("\x10\0\0\0", 4);
  expect_error([&] { inspect(dir.str()); }, ErrorKind::kInvalidFile, "model.safetensors");
}

}  // namespace
}  // namespace dgemma
