#include "backend/collective_watchdog.h"

#include <fmt/format.h>

#include "util/error.h"

namespace dgemma {

CollectiveWatchdog::CollectiveWatchdog(int ranks, double timeout_seconds, Hooks hooks,
                                       std::chrono::milliseconds poll)
    : timeout_seconds_(timeout_seconds),
      hooks_(std::move(hooks)),
      poll_(poll),
      pending_(static_cast<size_t>(ranks)) {
  DG_CHECK(ranks >= 1 && hooks_.done && hooks_.release && hooks_.abort);
  thread_ = std::thread([this] { run(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& q : pending_)
    for (Pending& p : q) hooks_.release(p.token);
}

void CollectiveWatchdog::issued(int rank, void* token, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  DG_CHECK(rank >= 0 && rank < static_cast<int>(pending_.size()));
  pending_[static_cast<size_t>(rank)].push_back({token, what, std::chrono::steady_clock::now()});
}

std::string CollectiveWatchdog::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void CollectiveWatchdog::fail(const std::string& why) {
  std::unique_lock<std::mutex> lock(mu_);
  fail_locked(why, lock);
}

void CollectiveWatchdog::fail_locked(const std::string& why, std::unique_lock<std::mutex>& lock) {
  if (!failure_.empty()) return;
  failure_ = why;
  lock.unlock();  // the abort may take a while and must not hold up issued() / failure()
  hooks_.abort(why);
  lock.lock();
}

void CollectiveWatchdog::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& q : pending_) {
    for (Pending& p : q) hooks_.release(p.token);
    q.clear();
  }
  failure_.clear();
}

void CollectiveWatchdog::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, poll_, [&] { return stop_; });
    if (stop_) break;
    if (!failure_.empty()) continue;
    const auto now = std::chrono::steady_clock::now();
    std::string why;
    for (size_t r = 0; r < pending_.size() && why.empty(); ++r) {
      auto& q = pending_[r];
      while (!q.empty() && hooks_.done(q.front().token)) {
        hooks_.release(q.front().token);
        q.pop_front();
      }
      if (!q.empty() && timeout_seconds_ > 0 &&
          std::chrono::duration<double>(now - q.front().since).count() > timeout_seconds_)
        why = fmt::format(
            "rank {}'s {} did not complete within {:.0f} s (a rank died or stopped calling the "
            "collectives)",
            r, q.front().what, timeout_seconds_);
    }
    if (why.empty() && hooks_.async_error) {  // unlocked: the hook may take the group's own lock
      lock.unlock();
      why = hooks_.async_error();
      lock.lock();
    }
    if (!why.empty()) fail_locked(why, lock);
  }
}

}  // namespace dgemma
