// The meeting point of a tensor-parallel group's host threads (backend/rendezvous.h) and the thread
// collective's failure paths built on it: values of a round reach every rank, a rank that waits past
// the timeout throws naming the ranks that never came (and no other rank waits on), an abort from any
// thread wakes every waiting rank, and reset() makes the group usable again.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "backend/rendezvous.h"
#include "backend/thread_collective.h"
#include "util/error.h"

namespace dgemma {
namespace {

void run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> t;
  for (int r = 0; r < n; ++r) t.emplace_back(fn, r);
  for (auto& x : t) x.join();
}

TEST(Rendezvous, EveryRankGetsEveryRanksValueOfTheRoundManyRoundsInARow) {
  const int n = 4, rounds = 200;
  Rendezvous meet(n, 0);
  std::vector<int> values(n * rounds);
  std::atomic<int> wrong{0};
  run_ranks(n, [&](int r) {
    for (int k = 0; k < rounds; ++k) {
      values[static_cast<size_t>(k * n + r)] = k * 10 + r;
      const std::vector<const void*> all = meet.exchange(r, &values[static_cast<size_t>(k * n + r)]);
      for (int s = 0; s < n; ++s)
        if (*static_cast<const int*>(all[static_cast<size_t>(s)]) != k * 10 + s) ++wrong;
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Rendezvous, ARankThatWaitsPastTheTimeoutThrowsNamingTheMissingRanks) {
  Rendezvous meet(3, 0.2);
  std::vector<std::string> errors(3);
  run_ranks(3, [&](int r) {
    if (r == 2) return;  // never arrives (a dead rank)
    try {
      meet.arrive(r);
    } catch (const Error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("tensor-parallel collective aborted"), std::string::npos)
        << errors[r];
    EXPECT_NE(errors[static_cast<size_t>(r)].find("rank(s) 2"), std::string::npos) << errors[r];
  }
  EXPECT_TRUE(meet.aborted());
  // Aborted: a later arrival throws at once instead of waiting for the timeout again.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(meet.arrive(0), Error);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(150));
  meet.reset();
  EXPECT_FALSE(meet.aborted());
  run_ranks(3, [&](int r) { meet.arrive(r); });  // usable again
}

TEST(Rendezvous, AbortFromAnotherThreadWakesEveryWaitingRank) {
  Rendezvous meet(3, 0);  // no timeout: only the abort can end the wait
  std::atomic<int> threw{0};
  std::thread watchdog([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    meet.abort("rank 2 died");
  });
  run_ranks(2, [&](int r) {
    try {
      meet.arrive(r);
    } catch (const Error& e) {
      if (std::string(e.what()).find("rank 2 died") != std::string::npos) ++threw;
    }
  });
  watchdog.join();
  EXPECT_EQ(threw.load(), 2);
}

TEST(ThreadCollective, ACollectiveThatTimesOutThrowsOnEveryWaitingRank) {
  ThreadCollectiveGroup g(2, 0.2);
  std::atomic<int> threw{0};
  run_ranks(2, [&](int r) {
    if (r == 1) return;  // rank 1 never enters the collective
    Tensor t = host_tensor(ScalarType::kF32, {4});
    try {
      g.rank(r).all_reduce_sum(t);
    } catch (const Error& e) {
      if (std::string(e.what()).find("timed out") != std::string::npos) ++threw;
    }
  });
  EXPECT_EQ(threw.load(), 1);
  g.reset();
  std::vector<Tensor> t(2);
  run_ranks(2, [&](int r) {
    t[static_cast<size_t>(r)] = host_tensor(ScalarType::kI32, {1});
    t[static_cast<size_t>(r)].ptr<int32_t>()[0] = r + 5;
    g.rank(r).all_reduce_sum(t[static_cast<size_t>(r)]);
  });
  EXPECT_EQ(t[0].ptr<int32_t>()[0], 11);  // i32 sums (histogram counts) exact
  EXPECT_EQ(t[1].ptr<int32_t>()[0], 11);
}

}  // namespace
}  // namespace dgemma
