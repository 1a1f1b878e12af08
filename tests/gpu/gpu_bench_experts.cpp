// `dgemma_gpu_check --bench experts`: the MoE block's expert GEMMs at the 26B-A4B shape (E128 top-8,
// H 2816, I 704) on a uniform random routing at T = 256 (batch 1, ~16 rows an expert), 1,024 (batch 4)
// and 4,096 (batch 16), per format (FP8 W8A8, NVFP4 W4A16, FP8 W8A16): the grouped kernels (W8A8
// with their activation quantisation launches), gate_up, down and both. Each row: the time of one
// launch sequence (the fastest of 5 bursts of 10 back to back on the backend's stream), the weight
// bytes of the experts hit over that time, and that rate against the H100's 3.35 TB/s.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "expert_problem.h"
#include "gpu_check_util.h"
#include "gpu_checks.h"
#include "support/expert_split.h"

namespace dgemma::gpu_test {
namespace {

void row(const std::string& what, double ms, double bytes) {
  const double rate = bytes / (ms * 1e-3);
  std::printf("%-72s %8.3f ms %7.0f GB/s %5.1f %%\n", what.c_str(), ms, rate / 1e9,
              100.0 * rate / kHbmBytesPerS);
  std::fflush(stdout);
}

}  // namespace

void experts_bench() {
  constexpr int64_t H = 2816, I = 704, E = 128, K = 8;
  std::printf("%-72s %11s %12s %7s\n", "experts of one MoE block (26B-A4B, E128 top-8)", "time", "weights",
              "of HBM");
  for (ExpertFormat f : {ExpertFormat::kW8a8, ExpertFormat::kNvfp4, ExpertFormat::kW8a16}) {
    Data d(std::string("expert bench ") + format_name(f));
    const ExpertProblem* weights = nullptr;
    ExpertProblem first;
    for (int64_t T : {int64_t{256}, int64_t{1024}, int64_t{4096}}) {
      ExpertProblem p = make_expert_problem(
          d, f, H, I, E, K, random_top_k(T, E, K, ExpertPopularity::kUniform, d.engine()), weights);
      if (weights == nullptr) {
        first = p;
        weights = &first;
      }
      const cuda::Stream st = cuda_stream();
      Tensor act = cuda().alloc(ScalarType::kBF16, {p.R, I}), y = cuda().alloc(ScalarType::kBF16, {p.R, H});
      cuda().fill_normal(act, 7, 0.0f, 0.5f);
      const double gu = p.gate_up_bytes(), dn = p.down_bytes();
      const std::string base = std::string(format_name(f)) + " T=" + std::to_string(T) + " ";
      row(base + "grouped gate_up" + (f == ExpertFormat::kW8a8 ? " (+ quantise x)" : ""),
          time_launches([&] { grouped_gate_up(p, act, st); }), gu);
      row(base + "grouped down" + (f == ExpertFormat::kW8a8 ? " (+ quantise act)" : ""),
          time_launches([&] { grouped_down(p, act, y, st); }), dn);
      row(base + "grouped both", time_launches([&] {
            grouped_gate_up(p, act, st);
            grouped_down(p, act, y, st);
          }),
          gu + dn);
      cuda().synchronize();
    }
  }
}

}  // namespace dgemma::gpu_test
