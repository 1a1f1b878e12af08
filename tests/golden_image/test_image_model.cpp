// A prompt with images through the whole model against the reference (the tiny model of
// tests/fixtures/image, three images of 60, 70 and 63 soft tokens, sliding window 16): the image-block
// mask each semantics builds, the encoder's K/V under the reference's generate() mask and under the
// causal one, the decoder's logits after each prefill, and greedy-free trajectories of the engine with the
// images in the prompt.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "backend/attention_keys.h"
#include "engine/kv_pool.h"
#include "golden/golden_util.h"
#include "image/image_processor.h"
#include "support/forward.h"
#include "support/model_core.h"

namespace dgemma {
namespace {

using golden::tensor_to_floats;

const std::string kDir = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/image";

const Json& manifest() {
  static const Json m = parse_json(read_text_file(kDir + "/manifest.json"), "manifest", true);
  return m;
}
NpyArray array(const std::string& key) {
  return read_npy(kDir + "/golden/" + key + ".npy");
}
std::vector<int32_t> ids(const std::string& key) {
  std::vector<int32_t> out;
  for (int64_t v : array(key).as_int()) out.push_back(static_cast<int32_t>(v));
  return out;
}

// Normalised mean-square error and the smallest per-row cosine of got against want (rows of `width`).
struct Err {
  double nmse = 0, min_cos = 1;
};
Err err(const std::vector<float>& got, const std::vector<float>& want, int64_t width) {
  Err e;
  double num = 0, den = 1e-30;
  for (size_t r = 0; r * width < want.size(); ++r) {
    double dot = 0, ng = 0, nw = 0;
    for (int64_t i = 0; i < width; ++i) {
      const double g = got[r * width + i], w = want[r * width + i];
      num += (g - w) * (g - w);
      den += w * w;
      dot += g * w;
      ng += g * g;
      nw += w * w;
    }
    if (ng > 0 && nw > 0) e.min_cos = std::min(e.min_cos, dot / std::sqrt(ng * nw));
  }
  e.nmse = num / den;
  return e;
}

// The tiny model with one image-mask semantics, and the prompt's images preprocessed as the server does.
struct ImageModel {
  ModelConfig config;
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::unique_ptr<DiffusionGemma> model;
  std::vector<PatchedImage> images;
  std::vector<int32_t> prompt = ids("prompt_ids");

  explicit ImageModel(ImageMask mask) {
    const std::string dir = kDir + "/" + manifest()["model"]["model_dir"].get<std::string>();
    config = load_model_config(dir);
    config.image_mask = mask;
    model = std::make_unique<DiffusionGemma>(config, load_weights(config, dir, *backend), *backend);
    const ProcessorConfig pc = load_processor_config(dir, config.vision);
    const ImageProcessing proc{pc.patch_size, pc.pooling_kernel_size, pc.max_soft_tokens};
    for (const Json& n : manifest()["model"]["prompt_images"])
      for (const Json& c : manifest()["preprocess"])
        if (c["name"] == n) {
          const std::string text = read_text_file(kDir + "/" + c["file"].get<std::string>());
          images.push_back(process_image_bytes(
              std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()), proc));
        }
  }
  // The image blocks of the prompt: each run of image tokens, in order.
  std::vector<std::pair<int64_t, int64_t>> blocks() const {
    std::vector<std::pair<int64_t, int64_t>> out;
    for (int64_t t = 0; t < static_cast<int64_t>(prompt.size()); ++t) {
      if (prompt[t] != config.image_token_id) continue;
      if (out.empty() || out.back().second != t) out.push_back({t, t});
      out.back().second = t + 1;
    }
    return out;
  }
  std::vector<ForwardImage> forward_images() const {
    std::vector<ForwardImage> out;
    const auto b = blocks();
    for (size_t i = 0; i < images.size(); ++i)
      out.push_back({b[i].first, VisionImageInput{images[i].grid_h, images[i].grid_w, images[i].patches}});
    return out;
  }
};

TEST(ImageModelGolden, TheGenerateMaskIsTheReferences) {
  ImageModel m(ImageMask::kGenerate);
  const auto b = m.blocks();
  ASSERT_EQ(b.size(), 3u);
  const std::vector<int64_t> soft = {60, 70, 63};
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(b[i].second - b[i].first, soft[i]);
  const int n = static_cast<int>(m.prompt.size());
  std::vector<ImageBlock> blocks;
  for (const auto& [f, e] : b) blocks.push_back({static_cast<int32_t>(f), static_cast<int32_t>(e)});
  for (const char* layer : {"full_attention", "sliding_attention"}) {
    const bool sliding = std::string(layer) == "sliding_attention";
    const ItemKeys rule{0,
                        n,
                        1,
                        sliding ? m.config.text.sliding_window : 0,
                        reinterpret_cast<const int32_t*>(blocks.data()),
                        static_cast<int>(blocks.size()),
                        0};
    const std::vector<int64_t> want = array(std::string("mask.") + layer).as_int();
    int64_t differ = 0;
    for (int i = 0; i < n; ++i) {
      const KeyRange r = query_keys(rule, i);
      for (int j = 0; j < n; ++j)
        differ += (j >= r.lo && j < r.hi) != (want[static_cast<size_t>(i * n + j)] != 0);
    }
    EXPECT_EQ(differ, 0) << layer;
  }
}

// The prefill's K/V of every layer under one semantics against both of the reference's: close to its own,
// clearly apart from the other where the two differ. Under the causal mask, also the decoder's logits on
// the fixed canvas (the reference's plain forward); under the generate mask the decoder is checked against
// generate()'s own first step (FirstStepOfGenerate): the plain forward's decoder over a cache the generate
// masks built is not what generate() computes.
void encoder_and_decoder(ImageMask mask, const std::string& own, const std::string& other) {
  ImageModel m(mask);
  Backend& be = *m.backend;
  const int64_t n = static_cast<int64_t>(m.prompt.size()), P = m.config.canvas_length;
  const int64_t npages = (n + P - 1) / P + 1;
  KvPoolPlan plan;
  plan.pages = {npages, npages};
  const KvStorage kv = allocate_kv_storage(m.config, be, plan);
  std::vector<int32_t> table(static_cast<size_t>(npages));
  for (int64_t i = 0; i < npages; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(npages - 1 - i);
  ItemKv item_kv;
  item_kv.tables = {std::span<const int32_t>(table), std::span<const int32_t>(table)};
  std::vector<ForwardItem> items(1);
  items[0].kind = ForwardItem::Kind::kEncode;
  items[0].tokens = m.prompt;
  items[0].kv = item_kv;
  items[0].images = m.forward_images();
  forward_items(be, *m.model, items, kv);
  std::printf("%s mask\n", image_mask_name(mask));
  for (size_t li = 0; li < kv.layers.size(); ++li) {
    const bool sliding = m.config.text.layers[li].type == LayerType::kSliding;
    const int64_t visible = sliding ? std::min<int64_t>(n, sliding_keep(m.config)) : n;
    for (const char* kind : {"k", "v"}) {
      const std::string key = "kv.layer" + std::to_string(li) + "." + kind;
      const NpyArray want = array("encoder." + own + "." + key),
                     apart = array("encoder." + other + "." + key);
      ASSERT_EQ(want.shape[1], visible) << key;
      const Tensor& pages = std::string(kind) == "k" ? kv.layers[li].k : kv.layers[li].v;
      const int64_t Hkv = pages.dim(1), D = pages.dim(3);
      const std::vector<float> all = tensor_to_floats(be, pages);
      std::vector<float> got;
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t pos = n - visible; pos < n; ++pos)
          for (int64_t d = 0; d < D; ++d)
            got.push_back(all[static_cast<size_t>(
                ((table[static_cast<size_t>(pos / P)] * Hkv + h) * P + pos % P) * D + d)]);
      const Err e = err(got, want.as_float(), D), x = err(got, apart.as_float(), D);
      const double gap = err(apart.as_float(), want.as_float(), D).nmse;  // the two references apart
      std::printf("  %-16s nmse %.2e (the other mask's: %.2e; the references apart: %.2e)  min cos %.6f\n",
                  key.c_str(), e.nmse, x.nmse, gap, e.min_cos);
      // bf16 noise of the tiny model (the reference ran in fp32): per-row cosine and NMSE.
      EXPECT_LE(e.nmse, 1e-3) << key;
      EXPECT_GE(e.min_cos, 0.995) << key;
      // Where the two masks give clearly different caches, this one is the right one's.
      if (gap > 1e-3) {
        EXPECT_LT(e.nmse, 0.1 * x.nmse) << key << ": not told apart from the other mask";
      }
    }
  }
  if (own != "causal") return;  // the generate() decoder: FirstStepOfGenerate
  item_kv.cached = n;
  const int64_t C = m.config.canvas_length, V = m.config.text.vocab_size;
  Tensor logits = be.alloc(ScalarType::kBF16, {C, V});
  const std::vector<int32_t> canvas = ids("canvas_ids");
  items[0] = ForwardItem{ForwardItem::Kind::kDenoise, canvas, item_kv, {}, logits, {}};
  forward_items(be, *m.model, items, kv);
  Tensor capped = be.alloc(ScalarType::kF32, {C, V});
  be.softcap_logits(logits, static_cast<float>(m.config.text.final_logit_softcapping), capped);
  const std::vector<float> got = tensor_to_floats(be, capped);
  const Err e = err(got, array("decoder.causal.logits_no_sc").as_float(), V);
  std::printf("  decoder logits   nmse %.2e  min cos %.6f\n", e.nmse, e.min_cos);
  EXPECT_LE(e.nmse, 1e-3);
  EXPECT_GE(e.min_cos, 0.999);
}

// The first denoising step of the reference's generate() (run "default", its initial canvas) after the
// prefill under the generate mask: the logits, soft-capped (bf16 noise of the tiny model).
TEST(ImageModelGolden, FirstStepOfGenerate) {
  ImageModel m(ImageMask::kGenerate);
  Backend& be = *m.backend;
  const int64_t n = static_cast<int64_t>(m.prompt.size()), P = m.config.canvas_length;
  const int64_t npages = (n + P - 1) / P + 1;
  KvPoolPlan plan;
  plan.pages = {npages, npages};
  const KvStorage kv = allocate_kv_storage(m.config, be, plan);
  std::vector<int32_t> table(static_cast<size_t>(npages));
  for (int64_t i = 0; i < npages; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  ItemKv item_kv;
  item_kv.tables = {std::span<const int32_t>(table), std::span<const int32_t>(table)};
  std::vector<ForwardItem> items(1);
  items[0].kind = ForwardItem::Kind::kEncode;
  items[0].tokens = m.prompt;
  items[0].kv = item_kv;
  items[0].images = m.forward_images();
  forward_items(be, *m.model, items, kv);
  item_kv.cached = n;
  const int64_t C = m.config.canvas_length, V = m.config.text.vocab_size;
  const std::vector<int32_t> canvas_rows = ids("run.default.c0.canvas_in");
  const std::vector<int32_t> canvas(canvas_rows.begin(), canvas_rows.begin() + C);
  Tensor logits = be.alloc(ScalarType::kBF16, {C, V});
  items[0] = ForwardItem{ForwardItem::Kind::kDenoise, canvas, item_kv, {}, logits, {}};
  forward_items(be, *m.model, items, kv);
  Tensor capped = be.alloc(ScalarType::kF32, {C, V});
  be.softcap_logits(logits, static_cast<float>(m.config.text.final_logit_softcapping), capped);
  const Err e = err(tensor_to_floats(be, capped), array("run.default.c0.s0.raw_logits").as_float(), V);
  std::printf("  first step logits: nmse %.2e  min cos %.6f\n", e.nmse, e.min_cos);
  EXPECT_LE(e.nmse, 1e-3);
  EXPECT_GE(e.min_cos, 0.999);
}

TEST(ImageModelGolden, EncoderAndDecoderUnderTheGenerateMask) {
  encoder_and_decoder(ImageMask::kGenerate, "generate", "causal");
}

TEST(ImageModelGolden, EncoderAndDecoderUnderTheCausalMask) {
  encoder_and_decoder(ImageMask::kCausal, "causal", "generate");
}

// The engine with the images in the prompt (chunked prefill, the tower run by the step that encodes each
// image) against the reference's generate(): every step's argmax and sample until a near-tie of the
// logits' rounding noise, then the final tokens when there was none.
TEST(ImageModelGolden, TrajectoriesWithImagesInThePrompt) {
  ImageModel m(ImageMask::kGenerate);
  const int C = m.config.canvas_length;
  for (const Json& meta : manifest()["model"]["runs"]) {
    const std::string run = meta["name"];
    SCOPED_TRACE(run);
    SequenceParams p;
    p.diffusion.max_denoising_steps = meta["max_denoising_steps"].get<int>();
    p.diffusion.entropy_bound = meta["entropy_bound"].get<double>();
    p.diffusion.t_min = meta["t_min"].get<double>();
    p.diffusion.t_max = meta["t_max"].get<double>();
    p.diffusion.stability_threshold = meta["stability_threshold"].get<int>();
    p.diffusion.confidence_threshold = meta["confidence_threshold"].get<double>();
    p.seed = meta["seed"].get<uint64_t>();
    p.max_tokens = meta["max_new_tokens"].get<int64_t>();
    for (const Json& e : manifest()["model"]["eos_token_ids"]) p.eos_ids.push_back(e.get<int32_t>());
    p.trace = true;
    ModelCoreOptions o;
    o.prefill_chunk = 80;  // chunks that must stop before blocks and take them whole
    o.max_num_batched_tokens = 96;
    ModelCore core(*m.backend, *m.model, o);
    std::unique_ptr<Sequence> seq = core.make_sequence(1, m.prompt, p);
    std::vector<PromptImage> images;
    std::vector<int64_t> soft;
    const auto b = m.blocks();
    for (size_t i = 0; i < m.images.size(); ++i) {
      PromptImage im;
      im.first = b[i].first;
      im.grid_h = m.images[i].grid_h;
      im.grid_w = m.images[i].grid_w;
      im.patches = std::make_shared<const std::vector<uint8_t>>(m.images[i].patches);
      im.digest.fill(static_cast<uint8_t>(i + 1));
      images.push_back(im);
      soft.push_back(b[i].second - b[i].first);
    }
    seq->set_images(std::move(images), std::move(soft));
    core.run({seq.get()}, 10000);
    ASSERT_EQ(seq->state, Sequence::State::kFinished);
    const std::vector<CanvasRecord> canvases = core.traces().canvases(seq->id());
    constexpr double kTieZ = 0.25;
    bool diverged = false;
    int matched = 0;
    const auto& steps = meta["steps_per_canvas"];
    for (size_t k = 0; k < steps.size() && !diverged; ++k) {
      ASSERT_LT(k, canvases.size());
      const std::string ck = "run." + run + ".c" + std::to_string(k) + ".";
      const auto argmax = array(ck + "argmax").as_int(), sample = array(ck + "sample").as_int();
      const auto canvas_in = array(ck + "canvas_in").as_int();
      for (int s = 0; s < steps[k].get<int>() && !diverged; ++s) {
        ASSERT_LT(s, canvases[k].steps);
        const StepRecord& r = canvases[k].trace[static_cast<size_t>(s)];
        for (int i = 0; i < C; ++i)
          ASSERT_EQ(r.canvas_in[static_cast<size_t>(i)], canvas_in[static_cast<size_t>(s * C + i)])
              << "input canvas";
        for (int i = 0; i < C; ++i) {
          const size_t at = static_cast<size_t>(s * C + i);
          if (r.argmax[static_cast<size_t>(i)] != argmax[at]) {
            EXPECT_LT(r.argmax_gap[static_cast<size_t>(i)], kTieZ) << "argmax differs without a near-tie";
            diverged = true;
          }
          if (r.sample[static_cast<size_t>(i)] != sample[at]) {
            EXPECT_LT(r.sample_gap[static_cast<size_t>(i)], kTieZ) << "sample differs without a near-tie";
            diverged = true;
          }
        }
        if (!diverged) ++matched;
      }
    }
    std::printf("%s: %d reference steps identical%s\n", run.c_str(), matched,
                diverged ? " (then a near-tie)" : "");
    if (diverged) continue;
    std::vector<int32_t> full;
    for (const auto& cr : canvases) full.insert(full.end(), cr.committed.begin(), cr.committed.end());
    bool seen = false;
    for (auto& t : full) {
      if (seen)
        t = 0;
      else if (std::find(p.eos_ids.begin(), p.eos_ids.end(), t) != p.eos_ids.end())
        seen = true;
    }
    EXPECT_EQ(full, ids("run." + run + ".tokens")) << "final tokens";
  }
}

}  // namespace
}  // namespace dgemma
