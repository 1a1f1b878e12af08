#pragma once
// Helpers for tests against the reference's golden fixtures (tests/fixtures/*/golden).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "model/diffusion_gemma.h"
#include "model/weights.h"
#include "util/bf16.h"
#include "util/json.h"
#include "util/mmap_file.h"
#include "util/npy.h"

namespace dgemma::golden {

inline std::string fixture_dir(const std::string& name) { return std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/" + name; }

struct Fixture {
  std::string name;
  ModelConfig config;
  GenerationConfig generation;
  Json manifest;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<DiffusionGemma> model;

  explicit Fixture(const std::string& fixture_name, std::unique_ptr<Backend> b = nullptr) : name(fixture_name) {
    const std::string dir = fixture_dir(name) + "/model";
    config = load_model_config(dir);
    generation = load_generation_config(dir, config);
    manifest = parse_json(read_text_file(fixture_dir(name) + "/golden/manifest.json"), "manifest", true);
    backend = b ? std::move(b) : make_cpu_backend();
    model = std::make_unique<DiffusionGemma>(config, load_weights(config, dir, *backend), *backend);
  }
  NpyArray array(const std::string& key) const { return read_npy(fixture_dir(name) + "/golden/" + key + ".npy"); }
  std::vector<int32_t> ids(const std::string& key) const {
    std::vector<int32_t> out;
    for (int64_t v : array(key).as_int()) out.push_back(static_cast<int32_t>(v));
    return out;
  }
};

// Element-wise comparison statistics of two float arrays.
struct Diff {
  double max_abs = 0, max_rel = 0, mean_abs = 0;
  double exact_fraction = 0;
  size_t worst = 0;
  size_t n = 0;
};

inline Diff diff(const std::vector<float>& got, const std::vector<float>& want) {
  Diff d;
  d.n = want.size();
  size_t exact = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double a = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (a == 0) ++exact;
    d.mean_abs += a;
    const double r = a / std::max(1e-3, std::fabs(static_cast<double>(want[i])));
    if (a > d.max_abs) {
      d.max_abs = a;
      d.worst = i;
    }
    d.max_rel = std::max(d.max_rel, r);
  }
  if (d.n) {
    d.mean_abs /= static_cast<double>(d.n);
    d.exact_fraction = static_cast<double>(exact) / static_cast<double>(d.n);
  }
  return d;
}

inline void print_diff(const std::string& what, const Diff& d) {
  std::printf("  %-40s n=%-7zu exact=%.4f max_abs=%.3g max_rel=%.3g mean_abs=%.3g\n", what.c_str(), d.n,
              d.exact_fraction, d.max_abs, d.max_rel, d.mean_abs);
}

inline std::vector<float> tensor_to_floats(Backend& backend, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.type == ScalarType::kBF16) {
    std::vector<uint16_t> raw(out.size());
    backend.to_host(t, raw.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(raw[i]);
  } else if (t.type == ScalarType::kF32) {
    backend.to_host(t, out.data());
  } else if (t.type == ScalarType::kI32) {
    std::vector<int32_t> raw(out.size());
    backend.to_host(t, raw.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(raw[i]);
  }
  return out;
}

// The reference's self-conditioning probabilities from its signal z [C, V]: an fp32 softmax per row,
// rounded to bf16 (host tensor).
inline Tensor bf16_softmax_rows(const std::vector<float>& z, int64_t C, int64_t V) {
  Tensor probs = host_tensor(ScalarType::kBF16, {C, V});
  std::vector<float> e(static_cast<size_t>(V));
  for (int64_t p = 0; p < C; ++p) {
    float mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, z[p * V + v]);
    float sum = 0;
    for (int64_t v = 0; v < V; ++v) sum += (e[v] = std::exp(z[p * V + v] - mx));
    for (int64_t v = 0; v < V; ++v) probs.ptr<uint16_t>()[p * V + v] = f32_to_bf16(e[v] / sum);
  }
  return probs;
}

}  // namespace dgemma::golden
