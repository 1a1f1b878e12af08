#include "backend/thread_collective.h"

#include <condition_variable>
#include <cstring>
#include <mutex>

#include "util/bf16.h"
#include "util/error.h"

namespace dgemma {

// A reusable rendezvous: every rank posts its buffers, the last one to arrive wakes the others, each
// rank copies what it needs, and a second rendezvous keeps the buffers alive until all have copied.
struct ThreadCollectiveGroup::State {
  explicit State(int n) : size(n), in(static_cast<size_t>(n)) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t generation = 0;
  bool aborted = false;
  std::vector<const Tensor*> in;

  // Waits until all ranks reached this point; throws when the group is aborted.
  void rendezvous(std::unique_lock<std::mutex>& lock) {
    if (aborted) throw Error(ErrorKind::kInternal, "tensor-parallel group aborted: another rank failed");
    const uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    cv.wait(lock, [&] { return generation != gen || aborted; });
    if (generation == gen) throw Error(ErrorKind::kInternal, "tensor-parallel group aborted: another rank failed");
  }
};

namespace {

class ThreadCollective final : public Collective {
 public:
  ThreadCollective(std::shared_ptr<ThreadCollectiveGroup::State> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->size; }
  std::string name() const override { return "threads"; }

  void all_gather_last(const Tensor& in, const Tensor& out) override {
    DG_CHECK(in.device == Device::kCpu && out.device == Device::kCpu && in.type == out.type && in.ndim >= 1);
    const int64_t n = in.dim(-1), rows = n > 0 ? in.numel() / n : 0;
    DG_CHECK(out.numel() == in.numel() * s_->size);
    exchange(in, [&](const std::vector<const Tensor*>& all) {
      const size_t es = scalar_size(in.type), row_bytes = static_cast<size_t>(n) * es;
      auto* dst = static_cast<uint8_t*>(out.data);
      for (int r = 0; r < s_->size; ++r) {
        const auto* src = static_cast<const uint8_t*>(all[r]->data);
        DG_CHECK(all[r]->numel() == in.numel() && all[r]->type == in.type);
        for (int64_t i = 0; i < rows; ++i)
          std::memcpy(dst + (static_cast<size_t>(i) * s_->size + r) * row_bytes, src + static_cast<size_t>(i) * row_bytes, row_bytes);
      }
    });
  }

  void all_reduce_sum(const Tensor& t) override {
    DG_CHECK(t.device == Device::kCpu && (t.type == ScalarType::kBF16 || t.type == ScalarType::kF32));
    // Every rank sums the same inputs in rank order into a private buffer, then writes it back after
    // all have read (so no rank reads a neighbour's partly written result).
    std::vector<uint8_t> result(t.nbytes());
    exchange(t, [&](const std::vector<const Tensor*>& all) {
      const int64_t n = t.numel();
      if (t.type == ScalarType::kF32) {
        auto* o = reinterpret_cast<float*>(result.data());
        for (int64_t i = 0; i < n; ++i) {
          float acc = all[0]->ptr<float>()[i];
          for (int r = 1; r < s_->size; ++r) acc += all[r]->ptr<float>()[i];
          o[i] = acc;
        }
      } else {
        auto* o = reinterpret_cast<uint16_t*>(result.data());
        for (int64_t i = 0; i < n; ++i) {
          float acc = bf16_to_f32(all[0]->ptr<uint16_t>()[i]);
          for (int r = 1; r < s_->size; ++r) acc += bf16_to_f32(all[r]->ptr<uint16_t>()[i]);
          o[i] = f32_to_bf16(acc);
        }
      }
    });
    std::memcpy(t.data, result.data(), result.size());
  }

  void barrier() override {
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->rendezvous(lock);
  }

 private:
  // Posts `mine`, waits for every rank's, runs `read` over all of them, waits until every rank has read.
  template <typename F>
  void exchange(const Tensor& mine, F&& read) {
    std::unique_lock<std::mutex> lock(s_->mu);
    s_->in[static_cast<size_t>(rank_)] = &mine;
    s_->rendezvous(lock);
    const std::vector<const Tensor*> all = s_->in;
    lock.unlock();
    read(all);
    lock.lock();
    s_->rendezvous(lock);
  }

  std::shared_ptr<ThreadCollectiveGroup::State> s_;
  int rank_;
};

}  // namespace

ThreadCollectiveGroup::ThreadCollectiveGroup(int size) : state_(std::make_shared<State>(size)) {
  DG_CHECK(size >= 1);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<ThreadCollective>(state_, r));
}
ThreadCollectiveGroup::~ThreadCollectiveGroup() = default;
int ThreadCollectiveGroup::size() const { return state_->size; }
Collective& ThreadCollectiveGroup::rank(int r) {
  DG_CHECK(r >= 0 && r < state_->size);
  return *ranks_[static_cast<size_t>(r)];
}
void ThreadCollectiveGroup::abort() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->aborted = true;
  state_->cv.notify_all();
}
void ThreadCollectiveGroup::reset() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->aborted = false;
  state_->arrived = 0;
}

}  // namespace dgemma
