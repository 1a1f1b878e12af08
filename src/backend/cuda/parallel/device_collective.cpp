// The one-device collective (backend/device_collective.h).
#include "backend/device_collective.h"

#include <cuda_runtime.h>

#include <array>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/error_bits.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/parallel/rank_sync.cuh"
#include "backend/cuda/parallel/shard_kernels.cuh"
#include "backend/rendezvous.h"
#include "util/error.h"

namespace dgemma {
namespace {

// What a rank posts at a meeting: its tensor's address and shape (read by the others' host threads).
struct Posted {
  const void* data = nullptr;
  int64_t numel = 0;
  ScalarType type = ScalarType::kU8;
};

// What the ranks share: the host meeting point (the tensors' addresses), each rank's context, and the
// device words of rank_sync.cuh (the arrival counters; the state word, mapped host memory).
struct Shared {
  Shared(int n, double timeout)
      : meet(n, timeout), timeout_ns(timeout > 0 ? static_cast<uint64_t>(timeout * 1e9) : 0) {}
  Rendezvous meet;
  uint64_t timeout_ns;
  std::vector<const cuda::Context*> ctx;
  cuda::RankSyncWords words;
  unsigned* state_host = nullptr;
  ~Shared() {
    if (words.arrivals) cudaFree(words.arrivals);
    if (state_host) cudaFreeHost(state_host);
  }
};

class DeviceCollective final : public Collective {
 public:
  DeviceCollective(std::shared_ptr<Shared> s, int rank) : s_(std::move(s)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_->meet.size(); }
  std::string name() const override { return "one-device"; }

  void all_gather_last(const Tensor& in, const Tensor& out) override {
    DG_CHECK(in.device == Device::kCuda && out.device == Device::kCuda && in.type == out.type &&
             in.ndim >= 1);
    const int N = size();
    DG_CHECK(out.numel() == in.numel() * N);
    const int64_t n = in.dim(-1), rows = n > 0 ? in.numel() / n : 0;
    const std::vector<Posted> all = post(in);
    const size_t width = static_cast<size_t>(n) * scalar_size(in.type);
    for (int r = 0; r < N; ++r) {
      const Posted& src = all[static_cast<size_t>(r)];
      if (rows > 0 && width > 0)
        CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(out.data) + static_cast<size_t>(r) * width,
                                     width * static_cast<size_t>(N), src.data, width, width,
                                     static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream()));
    }
    arrive();  // every rank has read this rank's input: it may be overwritten
  }

  void all_reduce_sum(const Tensor& t) override {
    DG_CHECK(t.device == Device::kCuda);
    const int type = t.type == ScalarType::kBF16  ? 0
                     : t.type == ScalarType::kF32 ? 1
                     : t.type == ScalarType::kI32 ? 2
                                                  : -1;
    DG_CHECK(type >= 0);
    // The sum goes to a private buffer first: the others still read this rank's values.
    Tensor sum = ctx().alloc(t.type, {t.numel()});
    const std::vector<Posted> all = post(t);
    cuda::RankPointers p{};
    for (int r = 0; r < size(); ++r) p.p[r] = all[static_cast<size_t>(r)].data;
    cuda::launch_sum_ranks(p, size(), type, t.numel(), sum.data, ctx().stream);
    arrive();
    if (t.nbytes() > 0)
      CUDA_CHECK(cudaMemcpyAsync(t.data, sum.data, t.nbytes(), cudaMemcpyDeviceToDevice, stream()));
  }

  void barrier() override {
    activate();
    ctx().sync();
    s_->meet.arrive(rank_);
  }

 private:
  const cuda::Context& ctx() const { return *s_->ctx[static_cast<size_t>(rank_)]; }
  cudaStream_t stream() const { return ctx().stream; }
  void activate() const { CUDA_CHECK(cudaSetDevice(ctx().device)); }

  // Meets the other ranks' host threads to learn every rank's tensor (all must agree on its size and
  // type, else every rank throws before queueing anything), then queues the arrival after which every
  // rank's input is written. A rank's two posting slots alternate: another rank may still read the
  // previous meeting's slot while this rank posts the next one, never the one before it.
  std::vector<Posted> post(const Tensor& mine) {
    activate();
    Posted& slot = slots_[next_slot_];
    next_slot_ ^= 1;
    slot = {mine.data, mine.numel(), mine.type};
    const std::vector<const void*> posted = s_->meet.exchange(rank_, &slot);
    std::vector<Posted> all;
    all.reserve(posted.size());
    for (const void* p : posted) all.push_back(*static_cast<const Posted*>(p));
    for (const Posted& p : all)
      if (p.numel != mine.numel() || p.type != mine.type)
        fail(ErrorKind::kInternal, "one-device collective: the ranks' tensors differ ({} and {} elements)",
             mine.numel(), p.numel);
    arrive();
    return all;
  }

  // Queues this rank's arrival and the wait for every rank's (cuda::launch_rank_arrive).
  void arrive() {
    cuda::launch_rank_arrive(s_->words, rank_, size(), s_->timeout_ns, ctx().error_dev, ctx().stream);
  }

  std::shared_ptr<Shared> s_;
  int rank_;
  std::array<Posted, 2> slots_{};
  int next_slot_ = 0;
};

class DeviceGroup final : public CollectiveGroup {
 public:
  DeviceGroup(const std::vector<Backend*>& backends, double timeout)
      : s_(std::make_shared<Shared>(static_cast<int>(backends.size()), timeout)) {
    const int n = static_cast<int>(backends.size());
    DG_CHECK(n >= 1 && n <= cuda::kMaxRanks);
    for (Backend* b : backends) s_->ctx.push_back(&cuda::context_of(*b));
    const int device = s_->ctx.front()->device;
    for (const cuda::Context* c : s_->ctx)
      if (c->device != device)
        fail(ErrorKind::kInvalidArgument,
             "the one-device collective joins backends of one GPU (got devices {} and {})", device,
             c->device);
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaMalloc(&s_->words.arrivals, cuda::kMaxRanks * sizeof(unsigned)));
    CUDA_CHECK(cudaMemset(s_->words.arrivals, 0, cuda::kMaxRanks * sizeof(unsigned)));
    CUDA_CHECK(cudaHostAlloc(&s_->state_host, sizeof(unsigned), cudaHostAllocMapped));
    *s_->state_host = cuda::kRankSyncRunning;
    CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&s_->words.state), s_->state_host, 0));
    for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<DeviceCollective>(s_, r));
  }
  int size() const override { return s_->meet.size(); }
  Collective& rank(int r) override { return *ranks_.at(static_cast<size_t>(r)); }
  // Ranks waiting on the host throw; ranks waiting on the device stop waiting (their next
  // synchronisation throws).
  void abort() override {
    s_->meet.abort("another rank failed");
    *static_cast<volatile unsigned*>(s_->state_host) = cuda::kRankSyncAborted;
  }
  std::string failure() const override {
    const unsigned state = *static_cast<volatile unsigned*>(s_->state_host);
    return state == cuda::kRankSyncTimedOut
               ? "a rank did not arrive at a collective within the group's timeout"
               : "";
  }
  // Once every rank's stream has drained (no wait runs any more): the counters back to zero, the state
  // running, and the collective's error bits of the ranks' error words cleared.
  void reset() override {
    s_->meet.reset();
    for (const cuda::Context* c : s_->ctx) {
      CUDA_CHECK(cudaSetDevice(c->device));
      CUDA_CHECK(cudaStreamSynchronize(c->stream));
    }
    CUDA_CHECK(cudaMemset(s_->words.arrivals, 0, cuda::kMaxRanks * sizeof(unsigned)));
    CUDA_CHECK(cudaDeviceSynchronize());
    for (const cuda::Context* c : s_->ctx)
      __atomic_and_fetch(c->error_host, ~(cuda::kErrCollectiveTimeout | cuda::kErrCollectiveAborted),
                         __ATOMIC_SEQ_CST);
    *static_cast<volatile unsigned*>(s_->state_host) = cuda::kRankSyncRunning;
  }

 private:
  std::shared_ptr<Shared> s_;
  std::vector<std::unique_ptr<DeviceCollective>> ranks_;
};

}  // namespace

std::unique_ptr<CollectiveGroup> make_device_group(const std::vector<Backend*>& backends,
                                                   double timeout_seconds) {
  return std::make_unique<DeviceGroup>(backends, timeout_seconds);
}

}  // namespace dgemma
