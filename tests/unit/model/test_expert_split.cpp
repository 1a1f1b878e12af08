// The expert-split benchmark's routings and per-rank shares (support/expert_split.h): every token routed
// to K distinct experts, the Zipf routing skewed and the uniform one not, the split by expert giving
// each routed row to exactly the rank holding its expert (ShardPlan's ranges), and the split by
// intermediate dimension's width and bytes at the 26B-A4B shape (E 128, top-8, H 2816, I 704).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "support/expert_split.h"

namespace dgemma {
namespace {

constexpr int64_t kE = 128, kK = 8, kH = 2816, kI = 704;

TEST(ExpertSplit, EveryTokenGetsKDistinctExperts) {
  for (ExpertPopularity p : {ExpertPopularity::kUniform, ExpertPopularity::kZipf}) {
    std::mt19937_64 rng(3);
    const std::vector<int32_t> idx = random_top_k(256, kE, kK, p, rng);
    ASSERT_EQ(idx.size(), static_cast<size_t>(256 * kK));
    for (int64_t t = 0; t < 256; ++t) {
      const std::set<int32_t> experts(idx.begin() + t * kK, idx.begin() + (t + 1) * kK);
      EXPECT_EQ(experts.size(), static_cast<size_t>(kK)) << popularity_name(p) << " token " << t;
      EXPECT_GE(*experts.begin(), 0);
      EXPECT_LT(*experts.rbegin(), kE);
    }
  }
}

// Mean rows an expert: T K / E = 256 at T = 4,096. Uniform: binomial(4096, 1/16), standard deviation
// ~15.5, so the busiest expert stays far below 1.3x the mean. Zipf (s = 1): the most popular expert is
// the first draw of 1 / H_128 ~ 18% of tokens and is picked in most of a token's 8 draws, over 10x
// the mean; the least popular ones are rarer than the mean.
TEST(ExpertSplit, ZipfRoutingIsSkewedAndUniformIsNot) {
  std::mt19937_64 rng(5);
  const double mean = 4096.0 * kK / kE;
  const std::vector<int64_t> uniform =
      rows_per_expert(random_top_k(4096, kE, kK, ExpertPopularity::kUniform, rng), kE);
  EXPECT_LT(static_cast<double>(*std::max_element(uniform.begin(), uniform.end())), 1.3 * mean);
  EXPECT_GT(static_cast<double>(*std::min_element(uniform.begin(), uniform.end())), 0.7 * mean);
  const std::vector<int64_t> zipf =
      rows_per_expert(random_top_k(4096, kE, kK, ExpertPopularity::kZipf, rng), kE);
  EXPECT_GT(static_cast<double>(*std::max_element(zipf.begin(), zipf.end())), 5.0 * mean);
  EXPECT_LT(static_cast<double>(*std::min_element(zipf.begin(), zipf.end())), mean);
}

TEST(ExpertSplit, ByExpertGivesEachRowToTheRankHoldingItsExpert) {
  std::mt19937_64 rng(7);
  for (ExpertPopularity p : {ExpertPopularity::kUniform, ExpertPopularity::kZipf}) {
    const std::vector<int32_t> idx = random_top_k(256, kE, kK, p, rng);
    const std::vector<int64_t> rows = rows_per_expert(idx, kE);
    const int64_t hit = std::count_if(rows.begin(), rows.end(), [](int64_t r) { return r > 0; });
    for (int n : {1, 2, 4, 8}) {
      int64_t next = 0, all_rows = 0, all_hit = 0;
      for (int r = 0; r < n; ++r) {
        const RankShare s = by_expert_share(rows, kI, n, r);
        EXPECT_EQ(s.experts.begin, next) << "ranks' experts are contiguous, in rank order";
        EXPECT_EQ(s.experts.size(), kE / n);
        next = s.experts.end;
        const int64_t own = std::count_if(
            idx.begin(), idx.end(), [&](int32_t e) { return e >= s.experts.begin && e < s.experts.end; });
        EXPECT_EQ(s.rows, own) << popularity_name(p) << " N=" << n << " rank " << r;
        EXPECT_EQ(s.width, kI);
        all_rows += s.rows;
        all_hit += s.experts_hit;
      }
      EXPECT_EQ(next, kE);
      EXPECT_EQ(all_rows, 256 * kK);
      EXPECT_EQ(all_hit, hit);
    }
  }
}

// The weight-only (W4A16 / W8A16) kernels step K by 64 and I = 704 = 11 x 64, so their down projection
// takes no even split of I: the rank width pads to 384 (N = 2) and 192 (N = 4). The W8A8 kernels step
// K by 16: 352 and 176 as they are.
TEST(ExpertSplit, ByIntermediateWidthAndBytes) {
  std::mt19937_64 rng(9);
  const std::vector<int64_t> rows =
      rows_per_expert(random_top_k(256, kE, kK, ExpertPopularity::kUniform, rng), kE);
  const RankShare one = by_expert_share(rows, kI, 1, 0);
  for (int64_t granule : {int64_t{16}, int64_t{64}}) {
    const RankShare s1 = by_intermediate_share(rows, kI, 1, granule);
    EXPECT_EQ(s1.width, kI);
    EXPECT_EQ(s1.rows, one.rows);
    EXPECT_EQ(share_weight_bytes(s1, kH, 1.0), share_weight_bytes(one, kH, 1.0));
  }
  EXPECT_EQ(by_intermediate_share(rows, kI, 2, 16).width, 352);
  EXPECT_EQ(by_intermediate_share(rows, kI, 4, 16).width, 176);
  EXPECT_EQ(by_intermediate_share(rows, kI, 2, 64).width, 384);
  EXPECT_EQ(by_intermediate_share(rows, kI, 4, 64).width, 192);
  for (int n : {2, 4}) {
    const RankShare s = by_intermediate_share(rows, kI, n, 16);
    EXPECT_EQ(s.rows, 256 * kK) << "every rank computes every routed row";
    EXPECT_EQ(s.experts_hit, one.experts_hit);
    EXPECT_DOUBLE_EQ(share_weight_bytes(s, kH, 1.0) * n, share_weight_bytes(one, kH, 1.0));
    double by_expert = 0;
    for (int r = 0; r < n; ++r) by_expert += share_weight_bytes(by_expert_share(rows, kI, n, r), kH, 1.0);
    EXPECT_DOUBLE_EQ(by_expert, share_weight_bytes(one, kH, 1.0))
        << "the ranks' experts read each weight once";
    EXPECT_GT(share_weight_bytes(by_intermediate_share(rows, kI, n, 64), kH, 1.0) * n,
              share_weight_bytes(one, kH, 1.0));
  }
}

}  // namespace
}  // namespace dgemma
