// Checks of the fused attention kernel against the CPU backend (filled in by the change that adds it).
#include "gpu_checks.h"

namespace dgemma::gpu_test {

std::vector<Case> fused_attention_cases() { return {}; }

}  // namespace dgemma::gpu_test
