// The MoE block (docs/MODEL.md §3.5-3.6): router on the raw residual with an fp32 softmax over all experts,
// top-k renormalised in fp32 and multiplied by per_expert_scale; each selected expert's output is
// scaled by its fp32 weight, rounded to bf16 and accumulated in bf16 in ascending expert order.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/collective.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/dot.h"
#include "backend/quant_reference.h"
#include "util/bf16.h"
#include "util/error.h"
#include "util/parallel.h"

namespace dgemma::cpu {
namespace {

// out[n, N] = x[n, K] . w^T of one expert (w already dequantised to fp32 value * block), then the
// activation and row scales of a quantised weight (quant_reference.h); x is quantised in place for
// FP8-dynamic, unless `given` holds its rows' scales (x then holds their decoded FP8 codes).
void expert_gemm(const Weight& w, int64_t ex, std::vector<float>& x, const std::vector<float>& wf,
                 std::vector<float>& out, int64_t n, int64_t N, int64_t K,
                 const std::vector<float>* given = nullptr) {
  std::vector<float> xs;
  if (given != nullptr) {
    DG_CHECK(w.act == ActQuant::kFp8Token && static_cast<int64_t>(given->size()) == n);
    xs = *given;
  } else if (w.act == ActQuant::kFp8Token) {
    xs.resize(static_cast<size_t>(n));
    quant_ref::quantize_fp8_per_token(x.data(), n, K, xs.data());
  }
  gemm_nt_f32(x.data(), wf.data(), out.data(), n, N, K);
  const float* rs = quant_ref::row_scales(w, ex);
  if (xs.empty() && !rs) return;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < N; ++j) {
      float& v = out[r * N + j];
      if (!xs.empty()) v *= xs[r];
      if (rs) v *= rs[j];
    }
}

// z = bf16(bf16(bf16(rmsnorm(h1[t])) * router.scale) * H^-0.5), or the precomputed one.
void router_input(const MoeArgs& a, int64_t t, float root, std::vector<float>& z) {
  const int64_t H = a.router_in.dim(1);
  if (!a.router_z.empty()) {
    const uint16_t* zt = a.router_z.ptr<uint16_t>() + t * H;
    for (int64_t i = 0; i < H; ++i) z[i] = bf16_to_f32(zt[i]);
    return;
  }
  const uint16_t* r = a.router_in.ptr<uint16_t>() + t * H;
  const uint16_t* rscale = a.router_scale.ptr<uint16_t>();
  double ss = 0;
  for (int64_t i = 0; i < H; ++i) {
    const float v = bf16_to_f32(r[i]);
    ss += static_cast<double>(v) * v;
  }
  const float ms = static_cast<float>(ss / static_cast<double>(H)) + a.eps;
  const float inv = std::pow(ms, -0.5f);
  for (int64_t i = 0; i < H; ++i) {
    float v = round_bf16(bf16_to_f32(r[i]) * inv);  // rmsnorm without scale
    v = round_bf16(v * bf16_to_f32(rscale[i]));      // * router.scale (bf16)
    z[i] = round_bf16(v * root);                     // * hidden^-0.5
  }
}

}  // namespace

void moe(const MoeArgs& a) {
  const int64_t T = a.router_in.dim(0), H = a.router_in.dim(1);
  const int64_t E = a.router_proj.dim(0);
  const int64_t I2 = a.gate_up.rows(), I = I2 / 2;
  const int K = a.top_k;
  // Experts [e0, e1) are local (all of them without expert parallelism).
  const int64_t e0 = a.expert_first, e1 = e0 + a.gate_up.experts();
  DG_CHECK(a.gate_up.data.ndim == 3 && a.down.data.ndim == 3);
  DG_CHECK(a.expert_in.dim(0) == T && e0 >= 0 && e1 <= E && a.gate_up.cols() == H);
  DG_CHECK(a.collective != nullptr || (e0 == 0 && e1 == E));
  DG_CHECK(a.down.experts() == e1 - e0 && a.down.rows() == H && a.down.cols() == I && K >= 1 && K <= E);
  const uint16_t* xin = a.expert_in.ptr<uint16_t>();
  // The experts' input rows already quantised (MoeArgs::expert_in_fp8): each routed row is its token's
  // row, so its decoded codes and scale are what quantising the gathered row gives.
  const bool given_fp8 = !a.expert_in_fp8.empty();
  if (given_fp8) check_fp8_input(a.expert_in_fp8, a.gate_up, T, Device::kCpu, "moe");
  const uint16_t* rproj = a.router_proj.ptr<uint16_t>();
  const uint16_t* pes = a.per_expert_scale.ptr<uint16_t>();
  const float root = static_cast<float>(std::pow(static_cast<double>(H), -0.5));

  // 1. Router per token.
  std::vector<int32_t> top_idx(static_cast<size_t>(T * K));
  std::vector<float> top_w(static_cast<size_t>(T * K));
  parallel_for(static_cast<size_t>(T), [&](size_t b, size_t e) {
    std::vector<float> z(H), logits(E), probs(E), wrow(H);
    std::vector<int32_t> order(E);
    for (size_t t = b; t < e; ++t) {
      router_input(a, static_cast<int64_t>(t), root, z);
      float mx = -INFINITY;
      for (int64_t ex = 0; ex < E; ++ex) {
        const uint16_t* w = rproj + ex * H;
        std::vector<float>& wf = wrow;
        for (int64_t i = 0; i < H; ++i) wf[i] = bf16_to_f32(w[i]);
        logits[ex] = round_bf16(dot_f32(z.data(), wf.data(), H));
        mx = std::max(mx, logits[ex]);
      }
      float sum = 0;
      for (int64_t ex = 0; ex < E; ++ex) {
        probs[ex] = std::exp(logits[ex] - mx);
        sum += probs[ex];
      }
      for (int64_t ex = 0; ex < E; ++ex) probs[ex] /= sum;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + K, order.end(), [&](int32_t x, int32_t y) {
        return probs[x] > probs[y] || (probs[x] == probs[y] && x < y);
      });
      float wsum = 0;
      for (int k = 0; k < K; ++k) wsum += probs[order[k]];
      for (int k = 0; k < K; ++k) {
        top_idx[t * K + k] = order[k];
        top_w[t * K + k] = (probs[order[k]] / wsum) * bf16_to_f32(pes[order[k]]);
      }
      if (!a.dbg_probs.empty())
        std::copy(probs.begin(), probs.end(), a.dbg_probs.ptr<float>() + t * E);
    }
  });
  if (!a.dbg_weights.empty()) std::copy(top_w.begin(), top_w.end(), a.dbg_weights.ptr<float>());
  if (!a.dbg_index.empty()) std::copy(top_idx.begin(), top_idx.end(), a.dbg_index.ptr<int32_t>());

  // 2. Experts: group the (token, slot) pairs by expert; each expert runs two small GEMMs.
  std::vector<std::vector<int64_t>> routed(E);  // entries: t * K + slot
  for (int64_t t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k) routed[top_idx[t * K + k]].push_back(t * K + k);
  // bf16(expert output * weight) per slot; slots of other ranks' experts hold -0 for the exchange.
  std::vector<uint16_t> y(static_cast<size_t>(T * K * H), a.collective ? kBf16NegZero : uint16_t{0});
  parallel_for(static_cast<size_t>(e1 - e0), [&](size_t b, size_t e) {
    for (size_t le = b; le < e; ++le) {
      const size_t ex = le + static_cast<size_t>(e0);
      const auto& list = routed[ex];
      if (list.empty()) continue;
      const int64_t n = static_cast<int64_t>(list.size());
      std::vector<float> xs(static_cast<size_t>(n * H)), wgu(static_cast<size_t>(I2 * H)), wd(static_cast<size_t>(H * I));
      std::vector<float> gu(static_cast<size_t>(n * I2)), act(static_cast<size_t>(n * I)), out(static_cast<size_t>(n * H));
      std::vector<float> x_scales;  // given_fp8: the rows' scales
      for (int64_t r = 0; r < n; ++r) {
        const int64_t t = list[r] / K;
        if (given_fp8) {
          const uint8_t* q = a.expert_in_fp8.codes.ptr<uint8_t>() + t * H;
          for (int64_t i = 0; i < H; ++i) xs[r * H + i] = f8e4m3_to_f32(q[i]);
          x_scales.push_back(a.expert_in_fp8.scales.ptr<float>()[t]);
          continue;
        }
        const uint16_t* src = xin + t * H;
        for (int64_t i = 0; i < H; ++i) xs[r * H + i] = bf16_to_f32(src[i]);
      }
      const int64_t lx = static_cast<int64_t>(le);  // the expert's index in the local weights
      quant_ref::dequant_rows(a.gate_up, lx, 0, I2, wgu.data());
      quant_ref::dequant_rows(a.down, lx, 0, H, wd.data());
      expert_gemm(a.gate_up, lx, xs, wgu, gu, n, I2, H, given_fp8 ? &x_scales : nullptr);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < I; ++i) {
          const float g = round_bf16(gelu_tanh(round_bf16(gu[r * I2 + i])));
          act[r * I + i] = round_bf16(g * round_bf16(gu[r * I2 + I + i]));
        }
      expert_gemm(a.down, lx, act, wd, out, n, H, I);
      for (int64_t r = 0; r < n; ++r) {
        const float w = top_w[list[r]];
        uint16_t* dst = y.data() + list[r] * H;
        for (int64_t i = 0; i < H; ++i) dst[i] = f32_to_bf16(round_bf16(out[r * H + i]) * w);
      }
    }
  });
  // Every slot from the rank holding its expert (an exact sum: one value, the rest -0).
  if (a.collective) a.collective->all_reduce_sum(borrow_tensor(y.data(), ScalarType::kBF16, {T * K, H}));
  // 3. bf16 accumulation per token in ascending expert order (the reference's index_add order).
  uint16_t* o = a.out.ptr<uint16_t>();
  parallel_for(static_cast<size_t>(T), [&](size_t b, size_t e) {
    std::vector<std::pair<int32_t, int>> slots(K);
    for (size_t t = b; t < e; ++t) {
      for (int k = 0; k < K; ++k) slots[k] = {top_idx[t * K + k], k};
      std::sort(slots.begin(), slots.end());
      for (int64_t i = 0; i < H; ++i) {
        float acc = 0.f;
        for (const auto& [ex, k] : slots) acc = round_bf16(acc + bf16_to_f32(y[(t * K + k) * H + i]));
        o[t * H + i] = f32_to_bf16(acc);
      }
    }
  });
}

}  // namespace dgemma::cpu
