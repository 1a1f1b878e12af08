// dgemma_gpu_check: the CUDA-vs-CPU checks of gpu_checks.h without GoogleTest, for machines that
// have CUDA but not the Debian test packages (built by scripts/device_build.sh, which defines
// DGEMMA_GPU_CHECK_MAIN; in the CMake build this file is empty and gpu_tests uses GoogleTest).
//   dgemma_gpu_check [substring...]   runs the checks whose name contains any substring (all if none)
// Prints each check's statistics, then "N passed, M failed"; exit status 0 only if all passed. With
// no GPU it fails (exit 1): on the machine it is meant for, that is an error.
#ifdef DGEMMA_GPU_CHECK_MAIN
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gpu_checks.h"

namespace {

class PrintReporter final : public dgemma::gpu_test::Reporter {
 public:
  void fail(const std::string& message) override {
    ++failures;
    std::printf("  FAIL: %s\n", message.c_str());
  }
  void note(const std::string& message) override { std::printf("  %s\n", message.c_str()); }
  int failures = 0;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace dgemma::gpu_test;
  if (!dgemma::cuda_available()) {
    std::printf("no CUDA GPU is visible to this process: the checks need one\n0 passed, 0 failed\n");
    return 1;
  }
  std::printf("random inputs: DGEMMA_TEST_SEED=%llu\n", static_cast<unsigned long long>(run_seed()));
  std::printf("backend: %s\n", cuda().name().c_str());
  int passed = 0, failed = 0;
  for (const Case& c : all_cases()) {
    bool selected = argc <= 1;
    for (int i = 1; i < argc; ++i) selected |= c.name.find(argv[i]) != std::string::npos;
    if (!selected) continue;
    std::printf("[ RUN  ] %s\n", c.name.c_str());
    std::fflush(stdout);
    PrintReporter r;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      c.run(r);
    } catch (const std::exception& e) {
      r.fail(std::string("exception: ") + e.what());
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r.failures == 0) {
      ++passed;
      std::printf("[  OK  ] %s (%.0f ms)\n", c.name.c_str(), ms);
    } else {
      ++failed;
      std::printf("[ FAIL ] %s (%d failure(s), %.0f ms)\n", c.name.c_str(), r.failures, ms);
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 && passed > 0 ? 0 : 1;
}
#endif
