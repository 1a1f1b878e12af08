#include "backend/thread_collective.h"

#include <cstring>

#include "backend/rendezvous.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma {

// Every rank posts its tensor, each rank copies what it needs from all of them, and a second meeting
// keeps the tensors alive (and unchanged) until all have read.
struct ThreadCollectiveGroup::State {
  State(int n, double timeout) : meet(n, timeout) {}
  Rendezvous meet;
};

namespace {

class ThreadCollective final : public Collective {
 public:
  ThreadCollective(std::shared_ptr<ThreadCollectiveGroup::State> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->meet.size(); }
  std::string name() const override { return "threads"; }

  void all_gather_last(const Tensor& in, const Tensor& out) override {
    DG_CHECK(in.device == Device::kCpu && out.device == Device::kCpu && in.type == out.type && in.ndim >= 1);
    const int64_t n = in.dim(-1), rows = n > 0 ? in.numel() / n : 0;
    const int N = size();
    DG_CHECK(out.numel() == in.numel() * N);
    exchange(in, [&](const std::vector<const Tensor*>& all) {
      const size_t es = scalar_size(in.type), row_bytes = static_cast<size_t>(n) * es;
      auto* dst = static_cast<uint8_t*>(out.data);
      for (int r = 0; r < N; ++r) {
        const auto* src = static_cast<const uint8_t*>(all[r]->data);
        DG_CHECK(all[r]->numel() == in.numel() && all[r]->type == in.type);
        for (int64_t i = 0; i < rows; ++i)
          std::memcpy(dst + (static_cast<size_t>(i) * N + r) * row_bytes,
                      src + static_cast<size_t>(i) * row_bytes, row_bytes);
      }
    });
  }

  void all_reduce_sum(const Tensor& t) override {
    DG_CHECK(t.device == Device::kCpu &&
             (t.type == ScalarType::kBF16 || t.type == ScalarType::kF32 || t.type == ScalarType::kI32));
    // Every rank sums the same inputs in rank order into a private buffer, then writes it back after
    // all have read (so no rank reads a neighbour's partly written result).
    std::vector<uint8_t> result(t.nbytes());
    const int N = size();
    exchange(t, [&](const std::vector<const Tensor*>& all) {
      const int64_t n = t.numel();
      for (int r = 0; r < N; ++r) DG_CHECK(all[r]->numel() == n && all[r]->type == t.type);
      if (t.type == ScalarType::kF32) {
        auto* o = reinterpret_cast<float*>(result.data());
        for (int64_t i = 0; i < n; ++i) {
          float acc = all[0]->ptr<float>()[i];
          for (int r = 1; r < N; ++r) acc += all[r]->ptr<float>()[i];
          o[i] = acc;
        }
      } else if (t.type == ScalarType::kI32) {
        auto* o = reinterpret_cast<int32_t*>(result.data());
        for (int64_t i = 0; i < n; ++i) {
          uint32_t acc = static_cast<uint32_t>(all[0]->ptr<int32_t>()[i]);  // wraps as the device's
          for (int r = 1; r < N; ++r) acc += static_cast<uint32_t>(all[r]->ptr<int32_t>()[i]);
          o[i] = static_cast<int32_t>(acc);
        }
      } else {
        auto* o = reinterpret_cast<uint16_t*>(result.data());
        for (int64_t i = 0; i < n; ++i) {
          float acc = bf16_to_f32(all[0]->ptr<uint16_t>()[i]);
          for (int r = 1; r < N; ++r) acc += bf16_to_f32(all[r]->ptr<uint16_t>()[i]);
          o[i] = f32_to_bf16(acc);
        }
      }
    });
    std::memcpy(t.data, result.data(), result.size());
  }

  void barrier() override { s_->meet.arrive(rank_); }

 private:
  // Posts `mine`, waits for every rank's, runs `read` over all of them, waits until every rank has read.
  template <typename F>
  void exchange(const Tensor& mine, F&& read) {
    const std::vector<const void*> posted = s_->meet.exchange(rank_, &mine);
    std::vector<const Tensor*> all(posted.size());
    for (size_t r = 0; r < posted.size(); ++r) all[r] = static_cast<const Tensor*>(posted[r]);
    read(all);
    s_->meet.arrive(rank_);
  }

  std::shared_ptr<ThreadCollectiveGroup::State> s_;
  int rank_;
};

}  // namespace

ThreadCollectiveGroup::ThreadCollectiveGroup(int size, double timeout_seconds)
    : state_(std::make_shared<State>(size, timeout_seconds)) {
  DG_CHECK(size >= 1);
  for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<ThreadCollective>(state_, r));
}
ThreadCollectiveGroup::~ThreadCollectiveGroup() = default;
int ThreadCollectiveGroup::size() const {
  return state_->meet.size();
}
Collective& ThreadCollectiveGroup::rank(int r) {
  DG_CHECK(r >= 0 && r < size());
  return *ranks_[static_cast<size_t>(r)];
}
void ThreadCollectiveGroup::abort() {
  state_->meet.abort("another rank failed");
}
void ThreadCollectiveGroup::reset() {
  state_->meet.reset();
}

}  // namespace dgemma
