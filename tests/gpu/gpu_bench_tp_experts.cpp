// `dgemma_gpu_check --bench tp-experts`: what one GPU of a tensor-parallel group of N = 2 or 4 spends on
// the MoE block's expert GEMMs under the two ways of splitting the experts (support/expert_split.h), at
// the 26B-A4B shape (E 128, top-8, H 2816, I 704), T = 256 / 1,024 / 4,096 (batch 1 / 4 / 16 canvases of
// 256), per format (FP8 W8A8, NVFP4 W4A16, FP8 W8A16, bf16), on a uniform routing and a Zipf (s = 1) one:
//   N=1 unsplit          every expert, as one GPU runs them;
//   N=n expert rank r    rank r of the split by expert, as moe/moe.cpp's expert-parallel path runs it:
//                        the -0 fill of the slot rows y [T k, H], then the grouped kernels over its E/N
//                        experts with the routing of all (ExpertSlice); the tile list's renumbering (one
//                        small launch) is left out;
//   N=n expert max       the slowest rank: the step waits for it;
//   N=n intermediate     any rank of the split by intermediate dimension (all alike): the grouped kernels
//                        over every expert with gate_up [E, 2w, H] and down [E, H, w], w = I/N rounded up
//                        to the format's K step (the NVFP4 / W8A16 kernels step by 64: w = 384 and 192);
//                        W8A8 quantises its [T k, w] activation rows with rank-local scales.
// The routings are drawn once (fixed seed) and shared by the formats. Each row: ms of one launch sequence
// (time_launches), the routed rows computed, the expert weight bytes read and that rate against the H100's
// HBM. The ranks run one after another, each alone on this GPU as on its own. The exchanges are not timed
// (one GPU); the "exchange" rows give their bytes per layer: the split by expert sums y [T k, H] bf16 over
// the ranks (exact: the others' rows are -0), the split by intermediate dimension sums the combined [T, H]
// (W8A8 with the one-GPU activation scales also takes the max of the [T k] row amaxes).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/moe/grouped.cuh"
#include "backend/cuda/parallel/shard_kernels.cuh"
#include "backend/cuda/quant/w8a8_experts.cuh"
#include "backend/cuda/quant/weight_only.cuh"
#include "expert_problem.h"
#include "gpu_check_util.h"
#include "gpu_checks.h"
#include "support/expert_split.h"

namespace dgemma::gpu_test {
namespace {

constexpr int64_t kH = 2816, kI = 704, kE = 128, kK = 8;

void row(const std::string& what, double ms, int64_t rows, double bytes) {
  const double rate = bytes / (ms * 1e-3);
  std::printf("%-58s %8.3f ms %6lld rows %7.1f MB %6.0f GB/s %5.1f %%\n", what.c_str(), ms,
              static_cast<long long>(rows), bytes / 1e6, rate / 1e9, 100.0 * rate / kHbmBytesPerS);
  std::fflush(stdout);
}

// Whether the format's grouped kernels take the problem's shape (the intermediate split's width).
bool kernels_take(const ExpertProblem& p) {
  const int64_t I2 = 2 * p.I;
  switch (p.format) {
    case ExpertFormat::kW8a8:
      return cuda::grouped_w8a8_supported(I2, p.H, p.d_gu.data) &&
             cuda::grouped_w8a8_supported(p.H, p.I, p.d_dn.data);
    case ExpertFormat::kNvfp4:
      return cuda::grouped_fp4_supported(I2, p.H, p.d_gu.data, p.d_gu_block.data) &&
             cuda::grouped_fp4_supported(p.H, p.I, p.d_dn.data, p.d_dn_block.data);
    case ExpertFormat::kW8a16:
      return cuda::grouped_fp8_supported(I2, p.H, p.d_gu.data) &&
             cuda::grouped_fp8_supported(p.H, p.I, p.d_dn.data);
    case ExpertFormat::kBf16:
      return cuda::grouped_moe_supported(p.T, p.H, p.I, p.E, p.K, p.d_x.data, p.d_gu.data, p.d_dn.data);
  }
  return false;
}

// The problem of this routing at intermediate width w, sharing the weights made for w before (made on
// first use and kept in `by_width`).
ExpertProblem problem_at(Data& d, ExpertFormat f, int64_t w, const std::vector<int32_t>& top_idx,
                         std::map<int64_t, ExpertProblem>& by_width) {
  const auto it = by_width.find(w);
  ExpertProblem p =
      make_expert_problem(d, f, kH, w, kE, kK, top_idx, it == by_width.end() ? nullptr : &it->second);
  if (it == by_width.end()) by_width.emplace(w, p);
  return p;
}

// One routing of the benchmark: T tokens' top-k (the same for every format).
struct Routing {
  int64_t T = 0;
  ExpertPopularity popularity = ExpertPopularity::kUniform;
  std::vector<int32_t> top_idx;
};

void split_rows(Data& d, ExpertFormat f, const Routing& routing, std::map<int64_t, ExpertProblem>& by_width) {
  const int64_t T = routing.T;
  const std::vector<int32_t>& top_idx = routing.top_idx;
  const std::vector<int64_t> rows = rows_per_expert(top_idx, kE);
  const double bpw = bytes_per_weight(f);
  const cuda::Stream st = cuda_stream();
  const std::string base =
      std::string(format_name(f)) + " T=" + std::to_string(T) + " " + popularity_name(routing.popularity);
  const int64_t R = T * kK;

  const ExpertProblem full = problem_at(d, f, kI, top_idx, by_width);
  if (!kernels_take(full)) throw std::runtime_error("tp-experts bench: no kernel for the unsplit shape");
  Tensor act = cuda().alloc(ScalarType::kBF16, {R, kI}), y = cuda().alloc(ScalarType::kBF16, {R, kH});
  cuda().fill_normal(act, 7, 0.0f, 0.5f);
  const RankShare one = by_expert_share(rows, kI, 1, 0);
  row(base + " N=1 unsplit", time_launches([&] {
        grouped_gate_up(full, act, st);
        grouped_down(full, act, y, st);
      }),
      one.rows, share_weight_bytes(one, kH, bpw));
  row(base + " -0 fill of y (in each expert rank)",
      time_launches([&] { cuda::launch_fill_u16(y.ptr<uint16_t>(), R * kH, 0x8000, st); }), 0, 0.0);
  cuda().synchronize();

  for (int n : {2, 4}) {
    const std::string bn = base + " N=" + std::to_string(n);
    double worst = 0, worst_bytes = 0;
    int64_t worst_rows = 0;
    for (int r = 0; r < n; ++r) {
      const RankShare s = by_expert_share(rows, kI, n, r);
      const ExpertSlice sl = expert_slice(full, s.experts.begin, s.experts.size());
      const double ms = time_launches([&] {
        cuda::launch_fill_u16(y.ptr<uint16_t>(), R * kH, 0x8000, st);
        grouped_gate_up(full, sl, act, st);
        grouped_down(full, sl, act, y, st);
      });
      const double bytes = share_weight_bytes(s, kH, bpw);
      row(bn + " expert rank " + std::to_string(r), ms, s.rows, bytes);
      if (ms > worst) worst = ms, worst_bytes = bytes, worst_rows = s.rows;
      cuda().synchronize();
    }
    row(bn + " expert max", worst, worst_rows, worst_bytes);

    const RankShare s = by_intermediate_share(rows, kI, n, k_granule(f));
    const ExpertProblem thin = problem_at(d, f, s.width, top_idx, by_width);
    const std::string what = bn + " intermediate w=" + std::to_string(s.width);
    if (!kernels_take(thin)) {
      std::printf("%-58s no kernel for this width\n", what.c_str());
      continue;
    }
    Tensor act_w = cuda().alloc(ScalarType::kBF16, {R, s.width});
    cuda().fill_normal(act_w, 8, 0.0f, 0.5f);
    row(what, time_launches([&] {
          grouped_gate_up(thin, act_w, st);
          grouped_down(thin, act_w, y, st);
        }),
        s.rows, share_weight_bytes(s, kH, bpw));
    cuda().synchronize();
  }
}

}  // namespace

void tp_experts_bench() {
  std::printf("%-58s %11s %11s %10s %11s %7s\n", "expert GEMMs of one MoE block per rank (26B-A4B)", "time",
              "rows", "weights", "rate", "of HBM");
  for (int64_t T : {int64_t{256}, int64_t{1024}, int64_t{4096}})
    std::printf(
        "exchange T=%-5lld per layer: by expert sum of y [T k, H] bf16 %.1f MB; by intermediate sum of "
        "[T, H] bf16 %.1f MB (+ W8A8 exact scales: max of [T k] f32 %.2f MB)\n",
        static_cast<long long>(T), 2.0 * T * kK * kH / 1e6, 2.0 * T * kH / 1e6, 4.0 * T * kK / 1e6);
  std::vector<Routing> routings;
  std::mt19937_64 rng(35);
  for (int64_t T : {int64_t{256}, int64_t{1024}, int64_t{4096}})
    for (ExpertPopularity pop : {ExpertPopularity::kUniform, ExpertPopularity::kZipf})
      routings.push_back({T, pop, random_top_k(T, kE, kK, pop, rng)});
  for (ExpertFormat f :
       {ExpertFormat::kW8a8, ExpertFormat::kNvfp4, ExpertFormat::kW8a16, ExpertFormat::kBf16}) {
    Data d(std::string("tp experts bench ") + format_name(f));
    std::map<int64_t, ExpertProblem> by_width;  // the weights per intermediate width, made once
    for (const Routing& routing : routings) split_rows(d, f, routing, by_width);
  }
}

}  // namespace dgemma::gpu_test
