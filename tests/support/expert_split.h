#pragma once
// The routings and per-rank shares of the expert-split benchmark (`dgemma_gpu_check --bench tp-experts`,
// tests/gpu/gpu_bench_tp_experts.cpp): random top-k routings with uniform or Zipf-like expert
// popularity, and what one rank of a tensor-parallel group of `size` computes and reads under the two
// ways of splitting the MoE experts (docs/MODEL.md "Experts: by expert, not by intermediate dimension"):
//   by expert (model/shard_plan.h, the implemented split): rank r holds experts ShardPlan::split(E)
//     whole and computes the routed rows of those experts only;
//   by intermediate dimension: every rank holds all E experts, gate's and up's rows [r I/N, ..) alike and
//     down's columns [r I/N, ..), and computes every routed row over its I/N columns (rounded up to the
//     kernels' K granule, the extra columns zero).
#include <cstdint>
#include <random>
#include <vector>

#include "model/shard_plan.h"

namespace dgemma {

// kZipf: p(e) proportional to 1 / popularity_rank(e) (Zipf with s = 1), the popularity ranks a random
// permutation of the experts (a real router's popular experts are not neighbours).
enum class ExpertPopularity { kUniform, kZipf };
const char* popularity_name(ExpertPopularity p);

// top_idx [T * K]: token t's K distinct experts at t K .. t K + K - 1, each drawn in turn in proportion
// to the popularity of the experts not picked yet.
std::vector<int32_t> random_top_k(int64_t T, int64_t E, int64_t K, ExpertPopularity popularity,
                                  std::mt19937_64& rng);

// Routed rows (token, slot pairs) per expert [E].
std::vector<int64_t> rows_per_expert(const std::vector<int32_t>& top_idx, int64_t E);

struct RankShare {
  IndexRange experts;       // the experts whose rows the rank computes
  int64_t rows = 0;         // the routed rows it computes
  int64_t experts_hit = 0;  // of its experts, those with rows (whose weights it reads)
  int64_t width = 0;        // the intermediate columns of each expert it holds
};

// Rank `rank` of `size` splitting by expert; rows: rows_per_expert.
RankShare by_expert_share(const std::vector<int64_t>& rows, int64_t I, int size, int rank);
// Any rank of `size` splitting by intermediate dimension (all ranks alike): width I / size rounded up to
// a multiple of k_granule (the down kernel's K step).
RankShare by_intermediate_share(const std::vector<int64_t>& rows, int64_t I, int size, int64_t k_granule);

// The expert weight bytes a rank reads: per expert hit, gate_up [2 width, H] and down [H, width] at
// bytes_per_weight (block scales included in it; channel scales left out).
double share_weight_bytes(const RankShare& s, int64_t H, double bytes_per_weight);

}  // namespace dgemma
