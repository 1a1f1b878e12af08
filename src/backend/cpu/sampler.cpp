// The per-position sampler maths of one denoising step (docs/MODEL.md §6.2, §6.4), per canvas position:
//   s = softcap * tanh(float(logit) / softcap)          (fp32, the reference's LM-head epilogue)
//   z = s / T                                            (the "processed" logits, fp32)
//   H = -sum p log p with p = softmax(z)                (fp64 here; the reference's fp32 differs ~1e-7)
//   argmax(z); sample = argmax(z + Gumbel) with the counter-based noise of (key, position, token)
//   probs for self-conditioning = bf16(softmax_fp32(bf16(z)))  (written over the logits; the
//   denominator summed in double)
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "util/bf16.h"
#include "util/counter_rng.h"
#include "util/error.h"
#include "util/parallel.h"

namespace dgemma::cpu {

void sampler(const SamplerArgs& a) {
  const int64_t C = a.logits.dim(0), V = a.logits.dim(1);
  DG_CHECK(a.logits.type == ScalarType::kBF16);
  uint16_t* logits = a.logits.ptr<uint16_t>();
  float* entropy = a.entropy.ptr<float>();
  int32_t* argmax = a.argmax.ptr<int32_t>();
  int32_t* sample = a.sample.ptr<int32_t>();
  float* lp = a.argmax_logprob.empty() ? nullptr : a.argmax_logprob.ptr<float>();
  const float cap = a.softcap, T = a.temperature;
  parallel_for(static_cast<size_t>(C), [&](size_t b, size_t e) {
    std::vector<float> z(V);
    for (size_t p = b; p < e; ++p) {
      uint16_t* row = logits + p * V;
      float zmax = -INFINITY, z2 = -INFINITY;
      int32_t am = 0;
      double best = -INFINITY, best2 = -INFINITY;
      int32_t smp = 0;
      for (int64_t v = 0; v < V; ++v) {
        float s = bf16_to_f32(row[v]) / cap;
        s = std::tanh(s);
        s = s * cap;
        const float zv = s / T;
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
