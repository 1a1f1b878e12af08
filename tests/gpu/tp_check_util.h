#pragma once
// Helpers of the tensor-parallel GPU checks (gpu_check_tensor_parallel.cpp, gpu_check_tp_graphs.cpp): N
// CUDA backends of one GPU as N ranks, one thread per rank, and the comparison of two engines'
// traced trajectories.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gpu_checks.h"
#include "support/model_core.h"

namespace dgemma::gpu_test {

// fn(k) for k in [0, n), each on its own thread, at once; throws the first error after all returned.
void each(int n, const std::function<void(int)>& fn);
// n CUDA backends of GPU 0.
std::vector<std::unique_ptr<Backend>> one_gpu_backends(int n, const CudaOptions& o);
std::vector<Backend*> pointers(const std::vector<std::unique_ptr<Backend>>& b);
// The bytes of a host tensor or of a tensor of `be` (read on be's stream).
std::vector<uint8_t> bytes_of(Backend& be, const Tensor& t);

struct Compared {
  int steps = 0;
  double max_dh = 0;
};
// Sequence sa of engine a against sb of engine b: both finished with the same output, and every traced
// step's tokens and decisions identical; the entropies identical too when `bit_exact`, else within the
// bound |dH| <= 0.02 + 1% (gpu_check_tensor_parallel.cpp says why). Counts the steps, keeps the largest |dH|.
void compare_traces(Reporter& r, const std::string& name, ModelCore& a, const Sequence& sa, ModelCore& b,
                    const Sequence& sb, Compared& c, bool bit_exact = false);

}  // namespace dgemma::gpu_test
