#pragma once
// CUDA backend vs CPU backend checks, written once and run by two drivers: the GoogleTest binary
// gpu_tests (test_gpu.cpp, CMake) and the self-contained dgemma_gpu_check (gpu_check_main.cpp,
// scripts/device_build.sh, for the GPU machine that has no GoogleTest). Checks use only backend/,
// model/ and util/; they report through a Reporter and may throw (a throw fails the check).
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace dgemma::gpu_test {

class Reporter {
 public:
  virtual ~Reporter() = default;
  virtual void fail(const std::string& message) = 0;
  // Informational lines (statistics printed for the record).
  virtual void note(const std::string& message) = 0;
};

struct Case {
  std::string name;  // letters, digits and '_' (GoogleTest parameter names)
  std::function<void(Reporter&)> run;
};

// Every check, in a fixed order.
std::vector<Case> all_cases();

// The two backends (created once per process; cuda() with run_options(), or within a WithOptions
// scope that scope's backend, gpu_check_util.h). cuda() throws when no GPU is usable.
Backend& cpu();
Backend& cuda();
// The kernel choices of the run's CUDA backend (the drivers' --kernel-family: the whole set of checks
// runs in the family given); set before the first cuda().
CudaOptions& run_options();

// Seed of this run's random inputs: DGEMMA_TEST_SEED if set, else fresh from std::random_device
// (printed by the drivers, so a failure can be replayed).
uint64_t run_seed();

// `dgemma_gpu_check --bench` rows of the quantised kernels at the 26B-A4B shapes (gpu_check_quant.cpp):
// the MoE block with NVFP4 / FP8 experts and the dense quantised matmuls, each next to its bf16 cost.
// `time_ms` times a callable (synchronised median), `row` prints one line.
void quant_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                 const std::function<void(const char*, double)>& row);
// `dgemma_gpu_check --bench w8a8` rows (gpu_check_w8a8.cpp; also the end of --bench quant and of
// the whole --bench, after every other row): the dense
// FP8 linears at the 26B shapes, T = 256 / 1024 / 4096: W8A8 (quantisation and cuBLASLt GEMM apart,
// then together) against the W8A16 kernel and bf16 cuBLAS; then the MoE block with FP8 experts,
// W8A16 against W8A8 (each tile shape), T = 256 .. 4096.
void w8a8_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                const std::function<void(const char*, double)>& row);
// `dgemma_gpu_check --bench vision` (gpu_check_vision.cpp): the released vision tower (dummy weights) at 1
// and 8 images of 280 soft tokens.
void vision_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                  const std::function<void(const char*, double)>& row);
// Rows of the fused small kernels (gpu_check_small_kernels.cpp): the attention prologue and the MoE
// routing, the sequences they replace against them, at T = 256 and 1024.
// `dgemma_gpu_check --bench [tail]` rows of guided decoding (gpu_check_guided.cpp): the sampler with a gap
// mask over a whole canvas of the 262,144-token vocabulary, and decide walking a whole 256-token gap,
// next to the unguided rows above them.
void guided_tail_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                       const std::function<void(const char*, double)>& row);
void small_kernel_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                        const std::function<void(const char*, double)>& row);

// `dgemma_gpu_check --bench fused` rows (gpu_check_fused_gemm.cpp): the fused projections' one GEMM
// against their parts' GEMMs at the 26B-A4B shapes, and gelu_mul_halves against gelu_mul.
void fused_gemm_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                      const std::function<void(const char*, double)>& row);

// `dgemma_gpu_check --bench` rows of one layer's attention over all items of a step (gpu_check_flash_attention.cpp):
// the flash kernel against the per-item cuBLAS path at batch 1 / 4 / 16 and causal prefill chunks.
void flash_bench(const std::function<double(const std::function<void()>&)>& time_ms,
                 const std::function<void(const char*, double)>& row);

// `dgemma_gpu_check --bench` rows of the bf16 grouped expert GEMMs alone (gpu_check_grouped_moe.cpp):
// gate_up and down of the automatic choice and every kernel variant at T = 256 .. 4096 on a random
// top-8 routing, with the weight-stream rate and the tensor-core rate each reaches.
void grouped_moe_bench();

// `dgemma_gpu_check --bench experts` rows (gpu_bench_experts.cpp): the MoE block's quantised expert
// GEMMs at the 26B-A4B shape, T = 256 / 1,024 / 4,096, per format: the grouped kernels' gate_up, down
// and both, ms, GB/s of weights and % of the H100's HBM bandwidth.
void experts_bench();

// `dgemma_gpu_check --bench tp-experts` rows (gpu_bench_tp_experts.cpp): per rank of N = 2 and 4, the
// expert GEMMs of the split by expert (each rank, the slowest) and by intermediate dimension against the
// unsplit block, at the 26B-A4B shape, T = 256 / 1,024 / 4,096, per format, on a uniform and a Zipf
// routing, with the bytes each rank reads and the exchanges' bytes.
void tp_experts_bench();

// `dgemma_gpu_check --bench gemm-algos` rows (gpu_bench_gemm_algos.cpp): every algorithm cuBLASLt's
// heuristic offers for the 26B-A4B layer's dense GEMMs, bf16 and W8A8 FP8, T = 256 / 1,024 / 4,096:
// configuration, time, weight bandwidth, and bit-identity with the product path's output.
void gemm_algos_bench();

}  // namespace dgemma::gpu_test
