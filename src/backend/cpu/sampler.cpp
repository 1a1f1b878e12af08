// The per-position sampler maths of one denoising step (docs/MODEL.md §6.2, §6.4), per canvas position:
//   s = softcap * tanh(float(logit) / softcap)          (fp32, the reference's LM-head epilogue)
//   z = s / T                                            (the "processed" logits, fp32)
//   H = -sum p log p with p = softmax(z)                (fp64 here; the reference's fp32 differs ~1e-7)
//   argmax(z); sample = argmax(z + Gumbel) with the counter-based noise of (key, position, token)
//   probs for self-conditioning = bf16(softmax_fp32(bf16(z)))  (written over the logits; the
//   denominator summed in double)
// With a sample filter (backend/sample_filter.h) the sample is the argmax of z + Gumbel over the tokens
// with z >= the row's floor; the floor comes from a histogram of the row's bf16 logits.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "util/bf16.h"
#include "util/counter_rng.h"
#include "util/error.h"
#include "util/parallel.h"

namespace dgemma::cpu {
namespace {

using sample_filter::Mass;

float z_of(uint16_t bits, float cap, float T) {
  float s = bf16_to_f32(bits) / cap;
  s = std::tanh(s);
  s = s * cap;
  return s / T;
}

// The row's floor on z from its histogram (hist[key] = count; keys outside [lo_key, kmax] are zero),
// sample_filter.h's stages in order. kmax is the row's largest valid key.
float row_floor(const uint32_t* hist, uint32_t kmax, float cap, float T, const SampleFilter& f) {
  auto zf = [&](uint32_t key) { return z_of(sample_filter::bits_of(key), cap, T); };
  const float m = zf(kmax);
  uint32_t lo = sample_filter::kMinKey;
  if (f.min_p > 0) lo = sample_filter::lowest_key_at_least(zf, static_cast<double>(m) + std::log(f.min_p), lo, kmax);
  if (f.top_k > 0) {
    uint64_t c = 0;
    uint32_t x = lo;
    for (uint32_t k = kmax; k >= lo; --k) {
      c += hist[k];
      if (c >= static_cast<uint64_t>(f.top_k)) {
        x = k;
        break;
      }
      if (k == lo) break;
    }
    lo = sample_filter::lowest_key_at_least(zf, static_cast<double>(zf(x)), lo, kmax);
  }
  if (f.top_p < 1) {
    auto mass = [&](uint32_t k) {
      return static_cast<Mass>(hist[k]) * sample_filter::mass_units(std::exp(static_cast<double>(zf(k)) - m));
    };
    Mass total = 0;
    for (uint32_t k = lo; k <= kmax; ++k)
      if (hist[k] != 0) total += mass(k);
    const double target = f.top_p * sample_filter::mass_to_double(total);
    Mass s = 0;
    uint32_t x = lo;
    for (uint32_t k = kmax; k >= lo; --k) {
      if (hist[k] != 0) {
        s += mass(k);
        if (sample_filter::mass_to_double(s) >= target) {
          x = k;
          break;
        }
      }
      if (k == lo) break;
    }
    lo = sample_filter::lowest_key_at_least(zf, static_cast<double>(zf(x)), lo, kmax);
  }
  while (hist[lo] == 0) ++lo;  // the least z present (kmax is)
  return zf(lo);
}

// Token order of the top-N lists: z descending (NaN last), then id ascending.
bool ranks_before(float za, int32_t a, float zb, int32_t b) {
  const float ka = std::isnan(za) ? -INFINITY : za, kb = std::isnan(zb) ? -INFINITY : zb;
  return ka > kb || (ka == kb && a < b);
}

}  // namespace

void sampler(const SamplerArgs& a) {
  const int64_t C = a.logits.dim(0), V = a.logits.dim(1);
  DG_CHECK(a.logits.type == ScalarType::kBF16);
  uint16_t* logits = a.logits.ptr<uint16_t>();
  float* entropy = a.entropy.ptr<float>();
  int32_t* argmax = a.argmax.ptr<int32_t>();
  int32_t* sample = a.sample.ptr<int32_t>();
  float* lp = a.argmax_logprob.empty() ? nullptr : a.argmax_logprob.ptr<float>();
  const float cap = a.softcap, T = a.temperature;
  const bool filtered = a.filter.active();
  const int top_n = a.top_n;
  DG_CHECK(top_n >= 0 && top_n <= V);
  if (top_n > 0) DG_CHECK(a.top_ids.numel() == C * top_n && a.top_logprobs.numel() == C * top_n);
  if (!a.sample_floor.empty()) DG_CHECK(a.sample_floor.numel() == C);
  parallel_for(static_cast<size_t>(C), [&](size_t b, size_t e) {
    std::vector<float> z(V);
    std::vector<uint32_t> hist(filtered ? sample_filter::kBins : 0);
    std::vector<int32_t> order(top_n > 0 ? V : 0);
    for (size_t p = b; p < e; ++p) {
      uint16_t* row = logits + p * V;
      float zmax = -INFINITY, z2 = -INFINITY;
      int32_t am = 0;
      double best = -INFINITY, best2 = -INFINITY;
      int32_t smp = 0;
      float floor = -INFINITY;
      if (filtered) {
        // z and the histogram first, then the floor, then Gumbel-max over the allowed tokens.
        uint32_t kmin = sample_filter::kMaxKey, kmax = 0;
        for (int64_t v = 0; v < V; ++v) {
          const float zv = z_of(row[v], cap, T);
          z[v] = zv;
          if (zv > zmax) {
            z2 = zmax;
            zmax = zv;
            am = static_cast<int32_t>(v);
          } else if (zv > z2) {
            z2 = zv;
          }
          const uint32_t key = sample_filter::key_of(row[v]);
          if (!sample_filter::valid_key(key)) continue;
          hist[key] += 1;
          kmin = std::min(kmin, key);
          kmax = std::max(kmax, key);
        }
        if (kmin <= kmax) {
          floor = row_floor(hist.data(), kmax, cap, T, a.filter);
          std::fill(hist.begin() + kmin, hist.begin() + kmax + 1, 0u);
        } else {
          floor = INFINITY;  // only NaN logits: nothing is allowed; the sample stays token 0
        }
        for (int64_t v = 0; v < V; ++v) {
          if (!(z[v] >= floor)) continue;
          const double g = static_cast<double>(z[v]) + rng::gumbel(a.sample_key, static_cast<uint32_t>(p), static_cast<uint32_t>(v));
          if (g > best) {
            best2 = best;
            best = g;
            smp = static_cast<int32_t>(v);
          } else if (g > best2) {
            best2 = g;
          }
        }
      }
      for (int64_t v = 0; v < (filtered ? 0 : V); ++v) {
        const float zv = z_of(row[v], cap, T);
        z[v] = zv;
        if (zv > zmax) {
          z2 = zmax;
          zmax = zv;
          am = static_cast<int32_t>(v);
        } else if (zv > z2) {
          z2 = zv;
        }
        const double g = static_cast<double>(zv) + rng::gumbel(a.sample_key, static_cast<uint32_t>(p), static_cast<uint32_t>(v));
        if (g > best) {
          best2 = best;
          best = g;
          smp = static_cast<int32_t>(v);
        } else if (g > best2) {
          best2 = g;
        }
      }
      if (!a.argmax_gap.empty()) a.argmax_gap.ptr<float>()[p] = zmax - z2;
      if (!a.sample_gap.empty()) a.sample_gap.ptr<float>()[p] = static_cast<float>(best - best2);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(z[v]) - zmax);
      const double lse = zmax + std::log(sum);
      double h = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double logp = static_cast<double>(z[v]) - lse;
        h -= std::exp(logp) * logp;
      }
      entropy[p] = static_cast<float>(h);
      argmax[p] = am;
      sample[p] = smp;
      if (lp != nullptr) lp[p] = static_cast<float>(static_cast<double>(zmax) - lse);
      if (!a.sample_floor.empty()) a.sample_floor.ptr<float>()[p] = floor;
      if (top_n > 0) {
        for (int64_t v = 0; v < V; ++v) order[v] = static_cast<int32_t>(v);
        std::partial_sort(order.begin(), order.begin() + top_n, order.end(),
                          [&](int32_t x, int32_t y) { return ranks_before(z[x], x, z[y], y); });
        int32_t* ids = a.top_ids.ptr<int32_t>() + p * top_n;
        float* lps = a.top_logprobs.ptr<float>() + p * top_n;
        for (int j = 0; j < top_n; ++j) {
          ids[j] = order[j];
          lps[j] = static_cast<float>(static_cast<double>(z[order[j]]) - lse);
        }
      }
      if (a.want_probs) {
        // Self-conditioning input: z rounded to bf16 (the reference stores it in the embedding dtype),
        // softmax in fp32, probabilities rounded to bf16.
        float bmax = -INFINITY;
        for (int64_t v = 0; v < V; ++v) {
          z[v] = round_bf16(z[v]);
          bmax = std::max(bmax, z[v]);
        }
        // The fp32 softmax denominator: accumulated in double and rounded once, close to the true
        // sum as torch's tree reduction is (a sequential fp32 sum over 262,144 terms drifts by
        // ~1e-4 relative, enough to move several % of the bf16 probabilities by a step).
        double dsum = 0;
        for (int64_t v = 0; v < V; ++v) {
          z[v] = std::exp(z[v] - bmax);
          dsum += z[v];
        }
        const float bsum = static_cast<float>(dsum);
        for (int64_t v = 0; v < V; ++v) row[v] = f32_to_bf16(z[v] / bsum);
      }
    }
  });
}

}  // namespace dgemma::cpu
