// Checks of the device-grouped MoE against the CPU backend (filled in by the change that adds it).
#include "gpu_checks.h"

namespace dgemma::gpu_test {

std::vector<Case> grouped_moe_cases() { return {}; }

}  // namespace dgemma::gpu_test
