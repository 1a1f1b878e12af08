// Model-level checks: the tiny golden fixtures (made by transformers) through the CUDA backend with
// the tolerances of tests/golden/test_forward.cpp, and whole forward passes plus one sampler /
// self-conditioning step on CPU and CUDA side by side.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "engine/kv_pool.h"
#include "gpu_check_util.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/weights.h"
#include "support/forward.h"
#include "util/bf16.h"
#include "util/counter_rng.h"
#include "util/json.h"
#include "util/mmap_file.h"
#include "util/npy.h"

namespace dgemma::gpu_test {
namespace {

std::string fixture_dir(const std::string& name) { return std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/" + name; }

struct Model {
  ModelConfig config;
  Backend* backend = nullptr;
  std::unique_ptr<DiffusionGemma> model;
  Model(const std::string& fixture, Backend& be) : backend(&be) {
    const std::string dir = fixture_dir(fixture) + "/model";
    config = load_model_config(dir);
    model = std::make_unique<DiffusionGemma>(config, load_weights(config, dir, be), be);
  }
  void forward(std::span<ForwardItem> items, const KvStorage& kv, const DumpHook& dump = {}) {
    forward_items(*backend, *model, items, kv, dump);
  }
};

NpyArray golden(const std::string& fixture, const std::string& key) {
  return read_npy(fixture_dir(fixture) + "/golden/" + key + ".npy");
}

std::vector<int32_t> golden_ids(const std::string& fixture, const std::string& key) {
  std::vector<int32_t> out;
  for (int64_t v : golden(fixture, key).as_int()) out.push_back(static_cast<int32_t>(v));
  return out;
}

// The tensor's bytes as the device holds them.
std::vector<uint8_t> bytes(Backend& be, const Tensor& t) {
  std::vector<uint8_t> out(t.nbytes());
  be.to_host(t, out.data());
  return out;
}

std::vector<float> floats(Backend& be, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.type == ScalarType::kBF16) {
    std::vector<uint16_t> raw(out.size());
    be.to_host(t, raw.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(raw[i]);
  } else if (t.type == ScalarType::kF32) {
    be.to_host(t, out.data());
  } else if (t.type == ScalarType::kI32) {
    std::vector<int32_t> raw(out.size());
    be.to_host(t, raw.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(raw[i]);
  }
  return out;
}

// The golden forward test's metric and bounds (tests/golden/test_forward.cpp): NMSE relative to the
// tensor's own scale <= 2.5e-4 and max|d| / rms <= 0.08 — a few compounded bf16 roundings, nothing
// structural (a wrong norm, scale or RoPE pair gives NMSE > 1e-2).
constexpr double kMaxNmse = 2.5e-4;
constexpr double kMaxNormAbs = 0.08;

void check_close(Reporter& r, const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                 double max_nmse = kMaxNmse, double max_norm_abs = kMaxNormAbs) {
  if (got.size() != want.size()) {
    r.fail(what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size()));
    return;
  }
  double ss_w = 0, ss_d = 0, worst = 0;
  size_t exact = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) {
      r.fail(what + ": element " + std::to_string(i) + " is not finite");
      return;
    }
    const double d = static_cast<double>(got[i]) - want[i];
    exact += d == 0;
    ss_w += static_cast<double>(want[i]) * want[i];
    ss_d += d * d;
    worst = std::max(worst, std::fabs(d));
  }
  const double rms = std::sqrt(ss_w / static_cast<double>(std::max<size_t>(1, want.size())));
  const double nmse = ss_w > 0 ? ss_d / ss_w : ss_d;
  const double norm_abs = rms > 0 ? worst / rms : worst;
  char line[256];
  std::snprintf(line, sizeof line, "%-40s n=%-8zu exact=%.4f nmse=%.2e max|d|/rms=%.3f", what.c_str(), want.size(),
                static_cast<double>(exact) / static_cast<double>(std::max<size_t>(1, want.size())), nmse, norm_abs);
  r.note(line);
  if (nmse > max_nmse) r.fail(what + ": nmse " + fmt_double(nmse) + " > " + fmt_double(max_nmse));
  if (norm_abs > max_norm_abs) r.fail(what + ": max|d|/rms " + fmt_double(norm_abs) + " > " + fmt_double(max_norm_abs));
}

// Valid rows [Hkv, length, D] of a cache tensor [Hkv, cap, D].
// One sequence's paged cache for hand-made forward passes: a pool of canvas-sized pages whose table
// reverses the page order (so the indirection is exercised).
struct PagedCache {
  ModelConfig config;
  KvStorage kv;
  std::vector<int32_t> table;
  int64_t encoded = 0;
  PagedCache(const ModelConfig& c, Backend& be, int64_t tokens) : config(c) {
    const int64_t npages = (tokens + c.canvas_length - 1) / c.canvas_length;
    KvPoolPlan plan;
    plan.pages = {npages, npages};
    kv = allocate_kv_storage(c, be, plan);
    for (int64_t i = 0; i < npages; ++i) table.push_back(static_cast<int32_t>(npages - 1 - i));
  }
  ItemKv item() const {
    ItemKv k;
    k.cached = encoded;
    k.tables = {std::span<const int32_t>(table), std::span<const int32_t>(table)};
    return k;
  }
  // Tokens the layer sees: all (full) or the last window-1 (sliding), as the reference keeps.
  int64_t visible(size_t li) const {
    return config.text.layers[li].type == LayerType::kSliding ? std::min<int64_t>(encoded, sliding_keep(config)) : encoded;
  }
  // The visible rows of layer li, [Hkv, visible, D] in position order.
  std::vector<float> rows(Backend& be, size_t li, bool keys) const {
    const Tensor& t = keys ? kv.layers[li].k : kv.layers[li].v;
    const int64_t Hkv = t.dim(1), P = t.dim(2), D = t.dim(3);
    const std::vector<float> all = floats(be, t);
    std::vector<float> out;
    for (int64_t h = 0; h < Hkv; ++h)
      for (int64_t pos = encoded - visible(li); pos < encoded; ++pos)
        for (int64_t d = 0; d < D; ++d) out.push_back(all[static_cast<size_t>(((table[pos / P] * Hkv + h) * P + pos % P) * D + d)]);
    return out;
  }
};

int64_t argmax_agreement(const std::vector<float>& logits, const std::vector<int64_t>& want, int64_t C, int64_t V) {
  int64_t same = 0;
  for (int64_t p = 0; p < C; ++p) {
    int64_t am = 0;
    for (int64_t v = 1; v < V; ++v)
      if (logits[p * V + v] > logits[p * V + am]) am = v;
    same += am == want[p];
  }
  return same;
}

// tests/golden/test_forward.cpp, on the CUDA backend.
void golden_forward(Reporter& r, const std::string& fx) {
  Backend& be = cuda();
  Model m(fx, be);
  const Json manifest = parse_json(read_text_file(fixture_dir(fx) + "/golden/manifest.json"), "manifest", true);
  const auto prompt = golden_ids(fx, "prompt_ids");
  const auto canvas = golden_ids(fx, "canvas_ids");
  const int64_t C = m.config.canvas_length, V = m.config.text.vocab_size, H = m.config.text.hidden_size;
  const int64_t rows = manifest["logits_rows_kept"].get<int64_t>();
  PagedCache kv(m.config, be, static_cast<int64_t>(prompt.size()) + m.config.canvas_length);

  std::vector<ForwardItem> items(1);
  items[0].kind = ForwardItem::Kind::kEncode;
  items[0].tokens = prompt;
  items[0].kv = kv.item();
  m.forward(items, kv.kv);
  kv.encoded = static_cast<int64_t>(prompt.size());
  for (size_t li = 0; li < kv.kv.layers.size(); ++li) {
    for (bool keys : {true, false}) {
      const std::string key = "kv.layer" + std::to_string(li) + (keys ? ".k" : ".v");
      const NpyArray want = golden(fx, key);
      if (want.shape[1] != kv.visible(li)) {
        r.fail(fx + " " + key + ": " + std::to_string(kv.visible(li)) + " tokens kept, golden " +
               std::to_string(want.shape[1]));
        continue;
      }
      check_close(r, fx + " " + key, kv.rows(be, li, keys), want.as_float());
    }
  }
  // Compared bit for bit: the pool's pages beyond the prompt were never written, and their bytes may
  // read as NaN, which no float comparison finds equal to itself.
  const std::vector<uint8_t> cache_before = bytes(be, kv.kv.layers[0].k);

  const int li = manifest["layer_for_intermediates"].get<int>();
  const std::string prefix = "layer" + std::to_string(li) + ".";
  std::map<std::string, std::vector<float>> captured;
  const DumpHook capture = [&](const std::string& name, const Tensor& t) {
    if (name.rfind(prefix, 0) == 0) captured[name] = floats(be, t);
  };
  Tensor logits = be.alloc(ScalarType::kBF16, {C, V});
  items[0] = ForwardItem{ForwardItem::Kind::kDenoise, canvas, kv.item(), {}, logits, {}};
  m.forward(items, kv.kv, capture);
  if (bytes(be, kv.kv.layers[0].k) != cache_before) r.fail(fx + ": the decoder wrote the cache");

  Tensor capped = be.alloc(ScalarType::kF32, {C, V});
  be.softcap_logits(logits, 30.0f, capped);
  std::vector<float> all = floats(be, capped), got = all;
  got.resize(static_cast<size_t>(rows * V));
  check_close(r, fx + " decoder.logits_no_sc", got, golden(fx, "decoder.logits_no_sc").as_float());
  const int64_t same = argmax_agreement(all, golden(fx, "decoder.argmax_no_sc").as_int(), C, V);
  r.note(fx + " argmax agreement (no SC): " + std::to_string(same) + " / " + std::to_string(C));
  if (same < C - C / 32) r.fail(fx + ": argmax agreement " + std::to_string(same) + " / " + std::to_string(C));

  for (const auto& name : manifest["intermediates"]) {
    const std::string key = name.get<std::string>();
    auto it = captured.find(key);
    if (it == captured.end()) {
      r.fail(fx + ": intermediate " + key + " was not dumped");
      continue;
    }
    const NpyArray want = golden(fx, "inter." + key);
    std::vector<float> g = it->second;
    g.resize(static_cast<size_t>(want.numel()));
    if (key.find("router_index") != std::string::npos) {
      const auto wi = want.as_int();
      int64_t eq = 0;
      for (size_t i = 0; i < wi.size(); ++i) eq += static_cast<int64_t>(g[i]) == wi[i];
      r.note(fx + " " + key + ": " + std::to_string(eq) + " / " + std::to_string(wi.size()) + " equal");
      if (static_cast<double>(eq) < 0.98 * static_cast<double>(wi.size())) r.fail(fx + " " + key + ": too many differ");
    } else if (key.find("router_probs") != std::string::npos || key.find("router_weights") != std::string::npos) {
      const auto w = want.as_float();
      double worst = 0;
      for (size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(g[i]) - w[i]));
      r.note(fx + " " + key + " max_abs=" + fmt_double(worst));
      if (!(worst < 0.02)) r.fail(fx + " " + key + ": max_abs " + fmt_double(worst));
    } else {
      check_close(r, fx + " " + key, g, want.as_float());
    }
  }

  if (rows == C) {
    const auto sc = golden(fx, "decoder.sc_input").as_float();
    Tensor probs = host_tensor(ScalarType::kBF16, {C, V});
    std::vector<float> e(static_cast<size_t>(V));
    for (int64_t p = 0; p < C; ++p) {
      float mx = -INFINITY;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, sc[p * V + v]);
      float sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += (e[v] = std::exp(sc[p * V + v] - mx));
      for (int64_t v = 0; v < V; ++v) probs.ptr<uint16_t>()[p * V + v] = f32_to_bf16(e[v] / sum);
    }
    Tensor soft = be.alloc(ScalarType::kBF16, {C, H});
    m.model->soft_embeddings(be.upload(probs), soft);
    items[0] = ForwardItem{ForwardItem::Kind::kDenoise, canvas, kv.item(), soft, logits, {}};
    m.forward(items, kv.kv);
    be.softcap_logits(logits, 30.0f, capped);
    check_close(r, fx + " decoder.logits_sc", floats(be, capped), golden(fx, "decoder.logits_sc").as_float());
  }
}

// The same forward passes on both backends: prefill (the cache), a denoising step, the sampler on
// its logits, the self-conditioning soft embeddings from the sampler's probabilities, and a second
// denoising step that uses them (the engine's per-step path), compared CPU vs CUDA.
void cpu_vs_cuda_forward(Reporter& r, const std::string& fx) {
  Model mc(fx, cpu()), mg(fx, cuda());
  const auto prompt = golden_ids(fx, "prompt_ids");
  const auto canvas = golden_ids(fx, "canvas_ids");
  const int64_t C = mc.config.canvas_length, V = mc.config.text.vocab_size, H = mc.config.text.hidden_size;
  const int64_t tokens = static_cast<int64_t>(prompt.size()) + C;
  PagedCache kc(mc.config, cpu(), tokens), kg(mg.config, cuda(), tokens);
  // Prefill in two chunks (the second exercises the cache + new keys path and the sliding window).
  const size_t half = prompt.size() / 2;
  for (auto [b, e] : {std::pair<size_t, size_t>{0, half}, std::pair<size_t, size_t>{half, prompt.size()}}) {
    std::span<const int32_t> chunk(prompt.data() + b, e - b);
    std::vector<ForwardItem> ic{{ForwardItem::Kind::kEncode, chunk, kc.item(), {}, {}, {}}};
    std::vector<ForwardItem> ig{{ForwardItem::Kind::kEncode, chunk, kg.item(), {}, {}, {}}};
    mc.forward(ic, kc.kv);
    mg.forward(ig, kg.kv);
    kc.encoded = kg.encoded = static_cast<int64_t>(e);
  }
  for (size_t li = 0; li < kc.kv.layers.size(); ++li)
    check_close(r, fx + " cpu-vs-cuda kv.layer" + std::to_string(li) + ".k", kg.rows(cuda(), li, true),
                kc.rows(cpu(), li, true));

  Tensor lc = cpu().alloc(ScalarType::kBF16, {C, V}), lg = cuda().alloc(ScalarType::kBF16, {C, V});
  Tensor sc_c = cpu().alloc(ScalarType::kBF16, {C, H}), sc_g = cuda().alloc(ScalarType::kBF16, {C, H});
  for (int step = 0; step < 2; ++step) {
    std::vector<ForwardItem> ic{{ForwardItem::Kind::kDenoise, canvas, kc.item(), step ? sc_c : Tensor{}, lc, {}}};
    std::vector<ForwardItem> ig{{ForwardItem::Kind::kDenoise, canvas, kg.item(), step ? sc_g : Tensor{}, lg, {}}};
    mc.forward(ic, kc.kv);
    mg.forward(ig, kg.kv);
    const std::string s = fx + " cpu-vs-cuda step " + std::to_string(step);
    check_close(r, s + " logits", floats(cuda(), lg), floats(cpu(), lc));
    if (step == 1) break;

    SamplerArgs ac;
    ac.logits = lc;
    ac.temperature = 0.8f;
    ac.sample_key = rng::stream_key(run_seed(), 0, 0, rng::kSample);
    ac.entropy = cpu().alloc(ScalarType::kF32, {C});
    ac.argmax = cpu().alloc(ScalarType::kI32, {C});
    ac.sample = cpu().alloc(ScalarType::kI32, {C});
    ac.argmax_logprob = cpu().alloc(ScalarType::kF32, {C});
    ac.argmax_gap = cpu().alloc(ScalarType::kF32, {C});
    SamplerArgs ag = ac;
    ag.logits = lg;
    ag.entropy = poisoned(ScalarType::kF32, {C});
    ag.argmax = poisoned(ScalarType::kI32, {C});
    ag.sample = poisoned(ScalarType::kI32, {C});
    ag.argmax_logprob = poisoned(ScalarType::kF32, {C});
    ag.argmax_gap = poisoned(ScalarType::kF32, {C});
    cpu().sampler(ac);
    cuda().sampler(ag);
    const auto am_c = i32(ac.argmax), am_g = i32(ag.argmax);
    const auto gap = f32(ac.argmax_gap);
    int64_t same = 0, decisive = 0;
    for (int64_t p = 0; p < C; ++p) {
      same += am_c[p] == am_g[p];
      if (gap[p] > 1e-2f) {  // logits differ like the golden bounds allow: compare clear decisions only
        ++decisive;
        if (am_c[p] != am_g[p]) r.fail(s + ": argmax differs at position " + std::to_string(p));
      }
    }
    r.note(s + ": argmax agreement " + std::to_string(same) + " / " + std::to_string(C) + " (" +
           std::to_string(decisive) + " with margin > 1e-2 must agree)");
    // Entropies of peaked rows live on the small-probability mass: a one-step bf16 difference of a
    // leading logit (within the golden bounds above) moves such an entropy by several percent, so
    // this bound only catches structural errors (a wrong temperature or soft-cap is off by far more).
    check_close(r, s + " entropy", f32(ag.entropy), f32(ac.entropy), 1e-2, 0.5);
    mc.model->soft_embeddings(lc, sc_c);
    mg.model->soft_embeddings(lg, sc_g);
    check_close(r, s + " soft embeddings", floats(cuda(), sc_g), floats(cpu(), sc_c));
  }
}

}  // namespace

std::vector<Case> model_cases() {
  return {
      {"golden_forward_tiny_a", [](Reporter& r) { golden_forward(r, "tiny_a"); }},
      {"golden_forward_tiny_b", [](Reporter& r) { golden_forward(r, "tiny_b"); }},
      {"cpu_vs_cuda_forward_tiny_a", [](Reporter& r) { cpu_vs_cuda_forward(r, "tiny_a"); }},
      {"cpu_vs_cuda_forward_tiny_b", [](Reporter& r) { cpu_vs_cuda_forward(r, "tiny_b"); }},
  };
}

}  // namespace dgemma::gpu_test
