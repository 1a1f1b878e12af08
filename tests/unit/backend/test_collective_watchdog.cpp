// The watchdog of a device collective's queued operations (backend/collective_watchdog.h) with fake
// tokens: completed operations are released and never fire; an operation pending past the timeout
// aborts the group once, naming the rank and the operation; an asynchronous error aborts likewise;
// reset() returns the group to health.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "backend/collective_watchdog.h"

namespace dgemma {
namespace {

using namespace std::chrono_literals;

struct Fake {
  std::mutex mu;
  std::set<void*> completed, released;
  std::string async_error;
  std::atomic<int> aborts{0};
  std::string abort_reason;

  CollectiveWatchdog::Hooks hooks() {
    CollectiveWatchdog::Hooks h;
    h.done = [this](void* t) {
      std::lock_guard<std::mutex> lock(mu);
      return completed.count(t) > 0;
    };
    h.release = [this](void* t) {
      std::lock_guard<std::mutex> lock(mu);
      released.insert(t);
    };
    h.async_error = [this] {
      std::lock_guard<std::mutex> lock(mu);
      return async_error;
    };
    h.abort = [this](const std::string& why) {
      std::lock_guard<std::mutex> lock(mu);
      abort_reason = why;
      ++aborts;
    };
    return h;
  }
  void complete(void* t) {
    std::lock_guard<std::mutex> lock(mu);
    completed.insert(t);
  }
  bool was_released(void* t) {
    std::lock_guard<std::mutex> lock(mu);
    return released.count(t) > 0;
  }
};

bool eventually(const std::function<bool()>& pred) {
  for (int i = 0; i < 200; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return pred();
}

int tokens[8];

TEST(CollectiveWatchdog, CompletedOperationsAreReleasedAndNeverAbort) {
  Fake f;
  CollectiveWatchdog w(2, 0.3, f.hooks(), 5ms);
  w.issued(0, &tokens[0], "all_gather");
  w.issued(1, &tokens[1], "all_gather");
  f.complete(&tokens[0]);
  f.complete(&tokens[1]);
  EXPECT_TRUE(eventually([&] { return f.was_released(&tokens[0]) && f.was_released(&tokens[1]); }));
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(f.aborts.load(), 0);
  EXPECT_EQ(w.failure(), "");
}

TEST(CollectiveWatchdog, AnOperationPendingPastTheTimeoutAbortsOnceNamingIt) {
  Fake f;
  CollectiveWatchdog w(2, 0.1, f.hooks(), 5ms);
  w.issued(0, &tokens[2], "all_reduce");
  f.complete(&tokens[2]);
  w.issued(1, &tokens[3], "all_gather");  // never completes: rank 0 never joined it
  EXPECT_TRUE(eventually([&] { return f.aborts.load() == 1; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(f.aborts.load(), 1);  // once
  const std::string why = w.failure();
  EXPECT_NE(why.find("rank 1"), std::string::npos) << why;
  EXPECT_NE(why.find("all_gather"), std::string::npos) << why;
  EXPECT_NE(why.find("did not complete"), std::string::npos) << why;
  w.reset();
  EXPECT_EQ(w.failure(), "");
  EXPECT_TRUE(f.was_released(&tokens[3]));
}

TEST(CollectiveWatchdog, AnAsynchronousErrorAborts) {
  Fake f;
  CollectiveWatchdog w(1, 0, f.hooks(), 5ms);  // no timeout: only the error can abort
  w.issued(0, &tokens[4], "all_reduce");
  {
    std::lock_guard<std::mutex> lock(f.mu);
    f.async_error = "NCCL: remote process exited";
  }
  EXPECT_TRUE(eventually([&] { return f.aborts.load() == 1; }));
  EXPECT_EQ(w.failure(), "NCCL: remote process exited");
}

TEST(CollectiveWatchdog, AFailureReportedByARankAbortsAndTheFirstReasonWins) {
  Fake f;
  CollectiveWatchdog w(2, 0, f.hooks(), 5ms);
  w.fail("rank 1 threw: out of memory");
  w.fail("later reason");
  EXPECT_EQ(f.aborts.load(), 1);
  EXPECT_EQ(w.failure(), "rank 1 threw: out of memory");
}

}  // namespace
}  // namespace dgemma
