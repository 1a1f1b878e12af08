#pragma once
// The watch over a device collective's queued operations (NCCL: they run on the GPUs' streams, so a
// host thread never blocks inside them and cannot time out itself). Each queued operation is reported
// with a token (NCCL: an event recorded after it); a thread polls the tokens of every rank and the
// communicator's asynchronous error. When a rank's oldest operation has not completed within the
// timeout, or the communicator reports an error, the watchdog aborts the group once (NCCL: ncclCommAbort
// of every rank, which ends the kernels that wait) and keeps the reason, which every later operation
// throws (failure()). What tokens are and how to poll them are the hooks: the logic is the same for any
// device collective and unit-tested without a GPU.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dgemma {

class CollectiveWatchdog {
 public:
  // Hooks are called from the watchdog's thread without its lock held (done / release excepted: they
  // must not call back into the watchdog).
  struct Hooks {
    std::function<bool(void* token)> done;              // the operation has completed
    std::function<void(void* token)> release;           // the token is no longer needed
    std::function<std::string()> async_error;           // non-empty: the group has failed (optional)
    std::function<void(const std::string& why)> abort;  // stops every rank's pending operations
  };
  // timeout_seconds <= 0: operations may take forever (async errors still abort).
  CollectiveWatchdog(int ranks, double timeout_seconds, Hooks hooks,
                     std::chrono::milliseconds poll = std::chrono::milliseconds(20));
  ~CollectiveWatchdog();  // stops the thread; releases the tokens still held
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Rank `rank` queued operation `what`; the watchdog owns `token` from now on.
  void issued(int rank, void* token, const std::string& what);
  // Why the group was aborted; empty while it is healthy.
  std::string failure() const;
  // Records `why` as the failure (first reason wins) and aborts, from any thread (a rank that failed).
  void fail(const std::string& why);
  // Back to healthy with nothing pending (after the group was rebuilt).
  void reset();

 private:
  struct Pending {
    void* token;
    std::string what;
    std::chrono::steady_clock::time_point since;
  };
  void run();
  void fail_locked(const std::string& why, std::unique_lock<std::mutex>& lock);

  const double timeout_seconds_;
  const Hooks hooks_;
  const std::chrono::milliseconds poll_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<Pending>> pending_;
  std::string failure_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace dgemma
