#pragma once
// A reusable meeting point of the N host threads of a tensor-parallel group (the thread and one-device
// collectives): every rank posts a value, the last one to arrive releases them all, and each gets every
// rank's value of that round. A rank that waits longer than the timeout, or any rank after abort(),
// throws Error(kInternal) naming why, and the meeting point stays aborted (no rank waits on) until reset().
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace dgemma {

class Rendezvous {
 public:
  // timeout_seconds <= 0: no timeout.
  Rendezvous(int size, double timeout_seconds);
  int size() const { return size_; }

  // Posts `mine` as rank `rank`'s value of this round and waits for the others; returns every rank's
  // value of the round, by rank.
  std::vector<const void*> exchange(int rank, const void* mine);
  // Waits for the others (a round without values).
  void arrive(int rank) { (void)exchange(rank, nullptr); }

  void abort(const std::string& why);
  // Back to a fresh state (no rank may be inside exchange).
  void reset();
  bool aborted() const;

 private:
  [[noreturn]] void throw_aborted() const;  // mu_ held

  const int size_;
  const double timeout_seconds_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<const void*> posted_;
  std::vector<int> waiting_;              // ranks arrived in this round
  std::vector<const void*> released_[2];  // the values of the last two rounds (by parity)
  bool aborted_ = false;
  std::string why_;
};

}  // namespace dgemma
