#include "backend/rendezvous.h"

#include <fmt/format.h>

#include <chrono>

#include "util/error.h"

namespace dgemma {

Rendezvous::Rendezvous(int size, double timeout_seconds)
    : size_(size), timeout_seconds_(timeout_seconds), posted_(static_cast<size_t>(size)) {
  DG_CHECK(size >= 1);
}

void Rendezvous::throw_aborted() const {
  throw Error(ErrorKind::kInternal, "tensor-parallel collective aborted: " + why_);
}

std::vector<const void*> Rendezvous::exchange(int rank, const void* mine) {
  DG_CHECK(rank >= 0 && rank < size_);
  std::unique_lock<std::mutex> lock(mu_);
  if (aborted_) throw_aborted();
  const uint64_t gen = generation_;
  posted_[static_cast<size_t>(rank)] = mine;
  waiting_.push_back(rank);
  if (++arrived_ == size_) {
    // A rank can be at most one round ahead of the slowest (it needs everyone at the next round to
    // leave it), so two snapshots by parity serve every rank still to wake up.
    released_[gen & 1] = posted_;
    arrived_ = 0;
    waiting_.clear();
    ++generation_;
    cv_.notify_all();
    return released_[gen & 1];
  }
  auto released = [&] { return generation_ != gen || aborted_; };
  if (timeout_seconds_ > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds_);
    if (!cv_.wait_until(lock, deadline, released)) {
      std::string missing;
      for (int r = 0; r < size_; ++r) {
        bool here = false;
        for (int w : waiting_) here |= w == r;
        if (!here) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      aborted_ = true;
      why_ = fmt::format("rank(s) {} did not reach the collective within {:g} s (rank {} timed out waiting)",
                         missing, timeout_seconds_, rank);
      cv_.notify_all();
      throw_aborted();
    }
  } else {
    cv_.wait(lock, released);
  }
  if (generation_ == gen) throw_aborted();  // aborted before the round completed
  return released_[gen & 1];
}

void Rendezvous::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) why_ = why;
  aborted_ = true;
  cv_.notify_all();
}

void Rendezvous::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = false;
  why_.clear();
  arrived_ = 0;
  waiting_.clear();
}

bool Rendezvous::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

}  // namespace dgemma
