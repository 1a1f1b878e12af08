#pragma once
// Near-ties of the MoE routing, for the free-running forwards whose input the reference and dgemma
// compute with different summation orders (the self-conditioned ones: the soft-embedding GEMM sums over
// the whole vocabulary). On the tiny fixtures one bf16 ulp of a single soft-embedding element moves the
// router probabilities of other rows by up to ~0.013 (measured: the top-k boundary of a row at layer 3
// went from 0.2489 / 0.2431 to 0.2616 / 0.2457), so a row whose k-th and (k+1)-th experts are about
// that close is routed by rounding luck and one implementation may pick the other expert: that row's
// logits then differ by far more than bf16 rounding (NMSE ~2e-2), while every other row stays at the
// bf16 bounds. Such rows are found from dgemma's own router probabilities and checked loosely; the
// others strictly.
#include <algorithm>
#include <functional>

#include "golden_util.h"

namespace dgemma::golden {

// The tie margin: of the order of that movement. The rows seen to route differently from the
// reference had margins 0.0022 and 0.0058; 0.01 flags 1 to 3 of the 16 rows of each tiny_a forward.
constexpr float kRouterTie = 0.01f;
constexpr float kRouterWeight = 0.05f;    // a boundary expert below this weight barely moves the row
constexpr double kTieRowMaxNmse = 0.1;    // a routed-differently row; a missing SC signal gives ~0.17

// The smallest margin over the decoder layers between the k-th and (k+1)-th router probability
// (k = top_k_experts) of each of the first `rows` rows of the forward that `run` performs, over the
// layers where the k-th expert weighs at least kRouterWeight (a swap of two near-zero experts does not
// move the row beyond rounding).
inline std::vector<float> routing_margins(Fixture& fx, int64_t rows,
                                          const std::function<void(const DumpHook&)>& run) {
  const int64_t k = fx.config.text.top_k_experts;
  std::vector<float> margin(static_cast<size_t>(rows), INFINITY);
  run([&](const std::string& name, const Tensor& t) {
    const std::string suffix = "router_probs";
    if (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      return;
    const std::vector<float> p = tensor_to_floats(*fx.backend, t);
    const int64_t E = t.dim(-1);
    if (E <= k) return;  // every expert is chosen: no boundary
    for (int64_t r = 0; r < std::min(rows, t.dim(0)); ++r) {
      std::vector<float> q(p.begin() + r * E, p.begin() + (r + 1) * E);
      std::sort(q.begin(), q.end(), std::greater<>());
      const float qk = q[static_cast<size_t>(k - 1)], next = q[static_cast<size_t>(k)];
      if (qk >= kRouterWeight)
        margin[static_cast<size_t>(r)] = std::min(margin[static_cast<size_t>(r)], qk - next);
    }
  });
  return margin;
}

// NMSE and max|d| / rms(want) over the rows [R, V] whose `keep` flag is set.
struct RowsDiff {
  double nmse = 0, norm_abs = 0;
  int64_t rows = 0;
};
inline RowsDiff rows_diff(const std::vector<float>& got, const std::vector<float>& want, int64_t V,
                          const std::vector<uint8_t>& keep) {
  double ss_w = 0, ss_d = 0, worst = 0;
  RowsDiff out;
  size_t n = 0;
  for (size_t r = 0; r < keep.size(); ++r) {
    if (!keep[r]) continue;
    ++out.rows;
    for (int64_t v = 0; v < V; ++v) {
      const size_t i = r * static_cast<size_t>(V) + static_cast<size_t>(v);
      const double d = static_cast<double>(got[i]) - want[i];
      ss_w += static_cast<double>(want[i]) * want[i];
      ss_d += d * d;
      worst = std::max(worst, std::fabs(d));
      ++n;
    }
  }
  const double rms = std::sqrt(ss_w / static_cast<double>(std::max<size_t>(1, n)));
  out.nmse = ss_w > 0 ? ss_d / ss_w : ss_d;
  out.norm_abs = rms > 0 ? worst / rms : worst;
  return out;
}

// Logits [R, V] of a free-running forward: the rows without a routing near-tie at the bf16 bounds,
// each near-tie row within kTieRowMaxNmse, and at most a quarter of the rows near a tie (else the
// strict part checks too little). Returns the strict rows' NMSE.
inline double check_logits_with_routing_ties(const std::string& what, const std::vector<float>& got,
                                             const std::vector<float>& want, int64_t V, const std::vector<float>& margin,
                                             double max_nmse, double max_norm_abs) {
  const int64_t R = static_cast<int64_t>(margin.size());
  EXPECT_EQ(got.size(), static_cast<size_t>(R * V)) << what;
  EXPECT_EQ(want.size(), static_cast<size_t>(R * V)) << what;
  if (got.size() != static_cast<size_t>(R * V) || want.size() != got.size()) return INFINITY;
  std::vector<uint8_t> strict(static_cast<size_t>(R)), tie(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) (margin[static_cast<size_t>(r)] < kRouterTie ? tie : strict)[static_cast<size_t>(r)] = 1;
  const RowsDiff s = rows_diff(got, want, V, strict);
  std::printf("  %-34s %lld rows strict: nmse=%.2e max|d|/rms=%.3f; %lld near a routing tie:", what.c_str(),
              static_cast<long long>(s.rows), s.nmse, s.norm_abs, static_cast<long long>(R - s.rows));
  for (int64_t r = 0; r < R; ++r) {
    if (!tie[static_cast<size_t>(r)]) continue;
    std::vector<uint8_t> one(static_cast<size_t>(R));
    one[static_cast<size_t>(r)] = 1;
    const RowsDiff d = rows_diff(got, want, V, one);
    std::printf(" row %lld (margin %.4f) nmse=%.2e", static_cast<long long>(r), margin[static_cast<size_t>(r)], d.nmse);
    EXPECT_LE(d.nmse, kTieRowMaxNmse) << what << " row " << r << " (near a routing tie)";
  }
  std::printf("\n");
  EXPECT_LE(4 * (R - s.rows), R) << what << ": too many rows near a routing tie for the strict check to mean much";
  EXPECT_LE(s.nmse, max_nmse) << what;
  EXPECT_LE(s.norm_abs, max_norm_abs) << what;
  return s.nmse;
}

}  // namespace dgemma::golden
