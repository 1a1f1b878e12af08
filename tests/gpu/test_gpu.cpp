// GoogleTest driver of the CUDA-vs-CPU checks (gpu_checks.h): one test per check, skipped with a
// message when no CUDA GPU is visible (CI machines have none).
#include <gtest/gtest.h>

#include <cstdio>

#include "backend/backend.h"
#include "gpu_checks.h"

namespace dgemma::gpu_test {

// GoogleTest prints a parameter with PrintTo found by argument-dependent lookup (Case's namespace).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

namespace {

class GtestReporter final : public Reporter {
 public:
  void fail(const std::string& message) override { ADD_FAILURE() << message; }
  void note(const std::string& message) override { std::printf("  %s\n", message.c_str()); }
};

class CudaVsCpu : public ::testing::TestWithParam<Case> {};

TEST_P(CudaVsCpu, Matches) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA GPU visible: the CUDA backend checks need one";
  static bool printed = false;
  if (!printed) {
    std::printf("  random inputs: DGEMMA_TEST_SEED=%llu\n", static_cast<unsigned long long>(run_seed()));
    printed = true;
  }
  GtestReporter r;
  GetParam().run(r);
}

INSTANTIATE_TEST_SUITE_P(Checks, CudaVsCpu, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace dgemma::gpu_test
