#pragma once
// Run-time knobs of the CUDA backend that tests use to reach code paths real sizes reach only with
// large inputs. Plain C++ (no CUDA headers).
#include <cstdint>

namespace dgemma::cuda {

// Upper bound of attention's bf16 score buffer per call (default 256 MiB); queries are processed in
// chunks that fit. Returns the previous value.
int64_t set_attention_score_budget(int64_t bytes);

}  // namespace dgemma::cuda
