// TensorParallelModel::run's rule for a rank that dies (the one place every collective goes through): the
// first failing rank and its cause in a FatalError, the group aborted so no rank waits on, a rank that does
// not return left behind after the bounded wait, and the model dead from then on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "backend/thread_collective.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "util/fatal_error.h"

namespace dgemma {
namespace {

const std::string kTiny = std::string(DGEMMA_SOURCE_DIR) + "/tests/fixtures/tiny_a/model";

struct Ranks {
  std::unique_ptr<TensorParallelModel> tp;
  Collective* rank0 = nullptr;  // rank 0's endpoint of the group (owned by tp)
};

Ranks two_ranks(double collective_timeout, double return_seconds) {
  const ModelConfig c = load_model_config(kTiny);
  auto be = make_cpu_backend();
  auto group = std::make_unique<ThreadCollectiveGroup>(2, collective_timeout);
  Ranks r;
  r.rank0 = &group->rank(0);
  r.tp = TensorParallelModel::cpu(c, dummy_weights(c, *be, 1), 2, std::move(group), return_seconds);
  return r;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string fatal_message(TensorParallelModel& tp, const std::function<void(int)>& fn) {
  try {
    tp.run(fn);
  } catch (const FatalError& e) {
    return e.what();
  }
  return "(no FatalError)";
}

TEST(TensorParallelFailure, HealthyRanksReturnNormally) {
  Ranks r = two_ranks(5, 5);
  std::atomic<int> ran{0};
  r.tp->run([&](int) { ++ran; });
  EXPECT_EQ(ran.load(), 2);
  EXPECT_TRUE(r.tp->failure().empty());
}

TEST(TensorParallelFailure, ARankThatThrowsIsFatalAndNamed) {
  Ranks r = two_ranks(60, 5);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string why = fatal_message(*r.tp, [&](int rank) {
    if (rank == 1) throw Error(ErrorKind::kInternal, "out of device memory");
    r.rank0->barrier();  // waits for rank 1, which never comes: the abort wakes it
  });
  EXPECT_EQ(why, "tensor-parallel rank 1 failed: out of device memory");
  EXPECT_LT(seconds_since(t0), 5.0) << "the abort, not the 60 s timeout, released rank 0";
  // The model is dead: the next step fails at once with the same reason, running nothing.
  std::atomic<int> ran{0};
  EXPECT_EQ(fatal_message(*r.tp, [&](int) { ++ran; }), why);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(r.tp->failure(), why);
}

TEST(TensorParallelFailure, ARankThatStopsRespondingIsBoundedAndLeftBehind) {
  Ranks r = two_ranks(1, 0.5);
  auto release = std::make_shared<std::atomic<bool>>(false);
  Collective* rank0 = r.rank0;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string why = fatal_message(*r.tp, [release, rank0](int rank) {
    if (rank == 1) {
      while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // stuck
      return;
    }
    rank0->barrier();
  });
  const double took = seconds_since(t0);
  release->store(true);  // lets the thread left behind end
  EXPECT_NE(why.find("tensor-parallel rank 0 failed: "), std::string::npos) << why;
  EXPECT_NE(why.find("rank(s) 1 did not reach the collective within 1 s"), std::string::npos) << why;
  EXPECT_NE(why.find("rank(s) 1 did not return within 0.5 s and were left running"), std::string::npos)
      << why;
  EXPECT_GE(took, 1.4);  // the collective's timeout, then the wait for the stuck rank
  EXPECT_LT(took, 10.0);
}

TEST(TensorParallelFailure, ARankThatDoesNotFinishAfterTheOthersIsFatal) {
  Ranks r = two_ranks(60, 0.3);
  auto release = std::make_shared<std::atomic<bool>>(false);
  const std::string why = fatal_message(*r.tp, [release](int rank) {
    if (rank == 1)
      while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  release->store(true);
  EXPECT_EQ(
      why,
      "tensor-parallel rank(s) 1 did not finish the step; rank(s) 1 did not return within 0.3 s and were "
      "left running");
}

}  // namespace
}  // namespace dgemma
