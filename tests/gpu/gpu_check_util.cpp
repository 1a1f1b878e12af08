#include "gpu_check_util.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <utility>

#include "backend/cuda/core/device_info.cuh"
#include "util/bf16.h"
#include "util/counter_rng.h"

namespace dgemma::gpu_test {

Backend& cpu() {
  static std::unique_ptr<Backend> b = make_cpu_backend();
  return *b;
}

namespace {
// The run's backend and the WithOptions scopes' (innermost last).
struct CudaBackends {
  CudaOptions run;
  std::unique_ptr<Backend> base;
  std::vector<std::pair<CudaOptions, std::unique_ptr<Backend>>> scoped;
};
CudaBackends& backends() {
  static CudaBackends b;
  return b;
}
}  // namespace

CudaOptions& run_options() { return backends().run; }

Backend& cuda() {
  CudaBackends& b = backends();
  if (!b.scoped.empty()) return *b.scoped.back().second;
  if (!b.base) b.base = make_cuda_backend(0, b.run);
  return *b.base;
}

WithOptions::WithOptions(const CudaOptions& options) {
  Backend& outer = cuda();
  outer.synchronize();
  outer.release_cached_memory();
  backends().scoped.emplace_back(options, make_cuda_backend(0, options));
}

WithOptions::~WithOptions() {
  try {
    backends().scoped.back().second->synchronize();
  } catch (const std::exception&) {
    // the check that used it reports the device error itself
  }
  backends().scoped.pop_back();
}

bool sm90_gpu() {
  const std::vector<cuda::DeviceInfo> d = cuda::query_devices();
  return !d.empty() && d[0].major == 9;
}

const CudaOptions& current_options() {
  const CudaBackends& b = backends();
  return b.scoped.empty() ? b.run : b.scoped.back().first;
}

CudaOptions options_with(const std::function<void(CudaOptions&)>& change) {
  CudaOptions o = current_options();
  change(o);
  return o;
}

uint64_t run_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("DGEMMA_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(s, nullptr, 0));
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return seed;
}

Data::Data(const std::string& name) : rng_(rng::splitmix64(run_seed() ^ std::hash<std::string>{}(name))) {}

Tensor Data::bf16(std::initializer_list<int64_t> dims, float std, float mean) {
  Tensor t = host_tensor(ScalarType::kBF16, dims);
  std::normal_distribution<float> dist(mean, std);
  uint16_t* p = t.ptr<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = f32_to_bf16(dist(rng_));
  return t;
}

Tensor Data::bf16_uniform(std::initializer_list<int64_t> dims, float lo, float hi) {
  Tensor t = host_tensor(ScalarType::kBF16, dims);
  std::uniform_real_distribution<float> dist(lo, hi);
  uint16_t* p = t.ptr<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = f32_to_bf16(dist(rng_));
  return t;
}

float Data::uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }

int64_t Data::integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }

Tensor clone(const Tensor& host) {
  Tensor t = host_tensor(host.type, {host.numel()});
  std::memcpy(t.data, host.data, host.nbytes());
  t.ndim = host.ndim;
  t.shape = host.shape;
  return t;
}

Tensor host_i32(const std::vector<int32_t>& v) {
  Tensor t = host_tensor(ScalarType::kI32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.ptr<int32_t>());
  return t;
}

Tensor host_f32(const std::vector<float>& v) {
  Tensor t = host_tensor(ScalarType::kF32, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.ptr<float>());
  return t;
}

Tensor up(const Tensor& host) { return cuda().upload(host); }

void poison(const Tensor& t) {
  std::vector<uint8_t> bytes(t.nbytes(), 0xFF);
  cuda().from_host(t, bytes.data());
}

Tensor poisoned(ScalarType type, std::initializer_list<int64_t> dims) {
  Tensor t = cuda().alloc(type, dims);
  poison(t);
  return t;
}

template <typename T>
static std::vector<T> fetch(const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  if (t.device == Device::kCpu)
    std::memcpy(v.data(), t.data, t.nbytes());
  else
    cuda().to_host(t, v.data());
  return v;
}

std::vector<uint16_t> u16(const Tensor& t) { return fetch<uint16_t>(t); }
std::vector<float> f32(const Tensor& t) { return fetch<float>(t); }
std::vector<int32_t> i32(const Tensor& t) { return fetch<int32_t>(t); }

int bf16_ulps(uint16_t a, uint16_t b) {
  auto key = [](uint16_t x) { return (x & 0x8000) ? -static_cast<int>(x & 0x7fff) : static_cast<int>(x & 0x7fff); };
  return std::abs(key(a) - key(b));
}

std::string fmt_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::vector<DecisionDiff> decision_diffs(const StepRecord& ref, const StepRecord& other) {
  std::vector<DecisionDiff> out;
  for (size_t i = 0; i < ref.argmax.size(); ++i) {
    if (i < other.argmax.size() && ref.argmax[i] != other.argmax[i])
      out.push_back({Decision::kArgmax, i, ref.argmax_gap[i], ref.argmax_gap[i] < kTieZ});
    if (i < other.sample.size() && ref.sample[i] != other.sample[i])
      out.push_back({Decision::kSample, i, ref.sample_gap[i], ref.sample_gap[i] < kTieZ});
    if (i < other.accept.size() && ref.accept[i] != other.accept[i])
      out.push_back({Decision::kAccept, i, ref.accept_margin[i], ref.accept_margin[i] < kTieH});
  }
  return out;
}

std::string describe(const DecisionDiff& d) {
  const char* what = d.what == Decision::kArgmax   ? "argmax"
                     : d.what == Decision::kSample ? "sample"
                                                   : "accept";
  return std::string(what) + " at " + std::to_string(d.position) + " (margin " + fmt_double(d.margin) +
         (d.near_tie ? ", a near-tie)" : ")");
}

bool stop_difference_explained(const StepRecord& ref, const StepRecord& other, double confidence_threshold) {
  if (ref.argmax != other.argmax) return true;
  float sum = 0;
  for (float h : ref.entropy) sum += h;
  return std::fabs(sum / ref.entropy.size() - confidence_threshold) < kTieH;
}

static bool bf16_nan(uint16_t x) { return (x & 0x7f80) == 0x7f80 && (x & 0x007f) != 0; }

void expect_bf16(Reporter& r, const std::string& what, const std::vector<uint16_t>& got,
                 const std::vector<uint16_t>& want, const Tol& tol) {
  if (got.size() != want.size()) {
    r.fail(what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size()));
    return;
  }
  const size_t n = want.size();
  double ss_w = 0, ss_d = 0;
  for (size_t i = 0; i < n; ++i) {
    const double w = bf16_to_f32(want[i]);
    if (std::isfinite(w)) ss_w += w * w;
  }
  const double rms = n ? std::sqrt(ss_w / static_cast<double>(n)) : 0.0;
  size_t exact = 0, bad = 0, first_bad = n;
  int max_ulp = 0;
  for (size_t i = 0; i < n; ++i) {
    if (got[i] == want[i]) {
      ++exact;
      continue;
    }
    const double g = bf16_to_f32(got[i]), w = bf16_to_f32(want[i]);
    const bool finite = std::isfinite(g) && std::isfinite(w);
    if (!finite || bf16_nan(got[i])) {  // a poisoned (unwritten) element, or non-finite disagreement
      ++bad;
      if (first_bad == n) first_bad = i;
      max_ulp = 1 << 20;
      continue;
    }
    const double d = g - w;
    ss_d += d * d;
    const int u = bf16_ulps(got[i], want[i]);
    max_ulp = std::max(max_ulp, u);
    if (u > tol.max_ulp && std::fabs(d) > tol.floor_rel_rms * rms) {
      ++bad;
      if (first_bad == n) first_bad = i;
    }
  }
  const double exact_frac = n ? static_cast<double>(exact) / static_cast<double>(n) : 1.0;
  const double bad_frac = n ? static_cast<double>(bad) / static_cast<double>(n) : 0.0;
  const double nmse = ss_w > 0 ? ss_d / ss_w : ss_d;
  char line[256];
  std::snprintf(line, sizeof line, "%-40s n=%-9zu exact=%.6f max_ulp=%d out_of_bound=%zu nmse=%.2e", what.c_str(), n,
                exact_frac, max_ulp, bad, nmse);
  r.note(line);
  if (bad_frac > tol.max_bad_fraction) {
    std::snprintf(line, sizeof line, "%s: %zu element(s) outside %d ulp / %.1e*rms; first at %zu: got %.8g want %.8g",
                  what.c_str(), bad, tol.max_ulp, tol.floor_rel_rms, first_bad,
                  static_cast<double>(bf16_to_f32(got[first_bad])), static_cast<double>(bf16_to_f32(want[first_bad])));
    r.fail(line);
  }
  if (exact_frac < tol.min_exact)
    r.fail(what + ": bit-identical fraction " + fmt_double(exact_frac) + " < " + fmt_double(tol.min_exact));
  if (nmse > tol.max_nmse) r.fail(what + ": nmse " + fmt_double(nmse) + " > " + fmt_double(tol.max_nmse));
}

void expect_f32(Reporter& r, const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                double abs_tol, double rel_tol) {
  if (got.size() != want.size()) {
    r.fail(what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size()));
    return;
  }
  size_t exact = 0, bad = 0, first_bad = want.size();
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    if (std::isnan(g) || std::isnan(w)) {
      if (!(std::isnan(g) && std::isnan(w))) {
        ++bad;
        if (first_bad == want.size()) first_bad = i;
      }
      continue;
    }
    if (g == w) {
      ++exact;
      continue;
    }
    const double d = std::fabs(g - w);
    worst = std::max(worst, d);
    if (!(d <= abs_tol + rel_tol * std::fabs(w))) {
      ++bad;
      if (first_bad == want.size()) first_bad = i;
    }
  }
  char line[256];
  std::snprintf(line, sizeof line, "%-40s n=%-9zu exact=%.6f max_abs=%.3g out_of_bound=%zu", what.c_str(), want.size(),
                want.empty() ? 1.0 : static_cast<double>(exact) / static_cast<double>(want.size()), worst, bad);
  r.note(line);
  if (bad > 0) {
    std::snprintf(line, sizeof line, "%s: %zu element(s) outside %.1e + %.1e*|want|; first at %zu: got %.9g want %.9g",
                  what.c_str(), bad, abs_tol, rel_tol, first_bad, static_cast<double>(got[first_bad]),
                  static_cast<double>(want[first_bad]));
    r.fail(line);
  }
}

AttnInputs make_attention_inputs(Data& d, const AttnCase& c) {
  const float s = std::sqrt(c.score_std / std::sqrt(static_cast<float>(c.D)));
  AttnInputs in;
  AttentionArgs& ca = in.host;
  ca.q = d.bf16({c.n, c.Hq, c.D}, s);
  ca.k_new = d.bf16({c.n, c.Hkv, c.D}, s);
  ca.v_new = d.bf16({c.n, c.Hkv, c.D}, 1.0f);
  if (c.cap > 0) {
    // The cached keys sit in a paged pool of 16-token pages at positions [first, first + L), first not
    // page-aligned, through a page table that reverses the page order (the indirection is exercised).
    constexpr int64_t kPage = 16;
    const int64_t first = c.cap - c.L;
    const int64_t npages = (c.cap + kPage - 1) / kPage;
    ca.k_pages = d.bf16({npages, c.Hkv, kPage, c.D}, s);
    ca.v_pages = d.bf16({npages, c.Hkv, kPage, c.D}, 1.0f);
    ca.page_table = host_tensor(ScalarType::kI32, {npages});
    for (int64_t i = 0; i < npages; ++i) ca.page_table.ptr<int32_t>()[i] = static_cast<int32_t>(npages - 1 - i);
    ca.cache_first = first;
  }
  ca.cache_len = c.L;
  ca.causal = c.causal;
  ca.window = c.window;
  ca.scaling = c.scaling;
  ca.out = host_tensor(ScalarType::kBF16, {c.n, c.Hq, c.D});
  AttentionArgs& ga = in.gpu;
  ga = ca;
  ga.q = up(ca.q);
  ga.k_new = up(ca.k_new);
  ga.v_new = up(ca.v_new);
  if (c.cap > 0) {
    ga.k_pages = up(ca.k_pages);
    ga.v_pages = up(ca.v_pages);
    ga.page_table = up(ca.page_table);
  }
  ga.out = poisoned(ScalarType::kBF16, {c.n, c.Hq, c.D});
  return in;
}

std::vector<char> compare_routing(Reporter& r, const std::string& name, const MoeArgs& cpu_args, const MoeArgs& gpu_args,
                                  int64_t min_tokens) {
  const int64_t T = cpu_args.router_in.dim(0), E = cpu_args.router_proj.dim(0), K = cpu_args.top_k;
  const auto pc = f32(cpu_args.dbg_probs), pg = f32(gpu_args.dbg_probs);
  const auto wc = f32(cpu_args.dbg_weights), wg = f32(gpu_args.dbg_weights);
  const auto ic = i32(cpu_args.dbg_index), ig = i32(gpu_args.dbg_index);
  std::vector<char> same(static_cast<size_t>(T), 0);
  int64_t same_probs = 0, same_route = 0;
  double worst_prob = 0;
  for (int64_t t = 0; t < T; ++t) {
    bool probs_equal = true;
    for (int64_t e = 0; e < E; ++e) {
      probs_equal &= pc[t * E + e] == pg[t * E + e];
      worst_prob = std::max(worst_prob, static_cast<double>(std::fabs(pc[t * E + e] - pg[t * E + e])));
    }
    bool route_equal = true;
    for (int64_t k = 0; k < K; ++k) route_equal &= ic[t * K + k] == ig[t * K + k] && wc[t * K + k] == wg[t * K + k];
    same_probs += probs_equal;
    same_route += route_equal;
    if (probs_equal && !route_equal)
      r.fail(name + ": token " + std::to_string(t) + " has identical router probabilities but another routing");
    same[static_cast<size_t>(t)] = route_equal;
  }
  r.note(name + ": tokens with bit-identical router probs " + std::to_string(same_probs) + "/" + std::to_string(T) +
         ", identical routing " + std::to_string(same_route) + "/" + std::to_string(T) + ", max |dprob| " +
         fmt_double(worst_prob));
  if (T >= min_tokens && same_probs * 2 < T)
    r.fail(name + ": fewer than half of the tokens have bit-identical router probabilities");
  if (worst_prob > 0.02) r.fail(name + ": router probabilities differ by " + fmt_double(worst_prob));
  return same;
}

Grouping group_by_expert(const std::vector<int32_t>& idx, int64_t E, int tile_rows, int64_t max_tiles) {
  Grouping g;
  g.offsets.assign(static_cast<size_t>(E) + 1, 0);
  for (int32_t e : idx) ++g.offsets[static_cast<size_t>(e) + 1];
  for (int64_t e = 0; e < E; ++e) g.offsets[e + 1] += g.offsets[e];
  std::vector<int32_t> next(g.offsets.begin(), g.offsets.end() - 1);
  g.pairs.assign(idx.size(), 0);
  for (size_t p = 0; p < idx.size(); ++p) g.pairs[static_cast<size_t>(next[idx[p]]++)] = static_cast<int32_t>(p);
  if (tile_rows > 0) {
    for (int64_t e = 0; e < E; ++e)
      for (int32_t r0 = g.offsets[e]; r0 < g.offsets[e + 1]; r0 += tile_rows)
        g.tiles.insert(g.tiles.end(), {static_cast<int32_t>(e), r0, std::min(tile_rows, g.offsets[e + 1] - r0), 0});
    while (static_cast<int64_t>(g.tiles.size()) < 4 * max_tiles) g.tiles.insert(g.tiles.end(), {-1, 0, 0, 0});
  }
  return g;
}

}  // namespace dgemma::gpu_test
