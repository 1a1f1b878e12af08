// The routings and per-rank shares of the expert-split benchmark (expert_split.h).
#include "support/expert_split.h"

#include <algorithm>
#include <numeric>

namespace dgemma {

const char* popularity_name(ExpertPopularity p) {
  return p == ExpertPopularity::kZipf ? "zipf" : "uniform";
}

std::vector<int32_t> random_top_k(int64_t T, int64_t E, int64_t K, ExpertPopularity popularity,
                                  std::mt19937_64& rng) {
  std::vector<double> weight(static_cast<size_t>(E), 1.0);
  if (popularity == ExpertPopularity::kZipf) {
    std::vector<int64_t> rank(static_cast<size_t>(E));
    std::iota(rank.begin(), rank.end(), int64_t{1});
    std::shuffle(rank.begin(), rank.end(), rng);
    for (int64_t e = 0; e < E; ++e)
      weight[static_cast<size_t>(e)] = 1.0 / static_cast<double>(rank[static_cast<size_t>(e)]);
  }
  std::vector<int32_t> top_idx;
  top_idx.reserve(static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> w = weight;
    for (int64_t k = 0; k < K; ++k) {
      std::discrete_distribution<int64_t> pick(w.begin(), w.end());
      const int64_t e = pick(rng);
      w[static_cast<size_t>(e)] = 0.0;
      top_idx.push_back(static_cast<int32_t>(e));
    }
  }
  return top_idx;
}

std::vector<int64_t> rows_per_expert(const std::vector<int32_t>& top_idx, int64_t E) {
  std::vector<int64_t> rows(static_cast<size_t>(E), 0);
  for (int32_t e : top_idx) ++rows.at(static_cast<size_t>(e));
  return rows;
}

namespace {

RankShare share_of(const std::vector<int64_t>& rows, IndexRange experts, int64_t width) {
  RankShare s;
  s.experts = experts;
  s.width = width;
  for (int64_t e = experts.begin; e < experts.end; ++e) {
    s.rows += rows[static_cast<size_t>(e)];
    s.experts_hit += rows[static_cast<size_t>(e)] > 0;
  }
  return s;
}

}  // namespace

RankShare by_expert_share(const std::vector<int64_t>& rows, int64_t I, int size, int rank) {
  ShardPlan plan;
  plan.rank = rank;
  plan.size = size;
  return share_of(rows, plan.split(static_cast<int64_t>(rows.size())), I);
}

RankShare by_intermediate_share(const std::vector<int64_t>& rows, int64_t I, int size, int64_t k_granule) {
  const int64_t part = I / size;
  return share_of(rows, {0, static_cast<int64_t>(rows.size())},
                  (part + k_granule - 1) / k_granule * k_granule);
}

double share_weight_bytes(const RankShare& s, int64_t H, double bytes_per_weight) {
  return static_cast<double>(s.experts_hit) * 3.0 * static_cast<double>(s.width * H) * bytes_per_weight;
}

}  // namespace dgemma
