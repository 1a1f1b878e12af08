// The one-device collective (backend/device_collective.h).
#include "backend/device_collective.h"

#include <cuda_runtime.h>

#include "backend/cuda/core/check.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/parallel/shard_kernels.cuh"
#include "backend/rendezvous.h"
#include "util/error.h"

namespace dgemma {
namespace {

// What the ranks share: the host meeting point, each rank's context, and the streams' meeting
// (launch_rank_barrier): one arrival counter per rank in device memory, and the abort and failure
// words in mapped host memory (the host sets the first, reads the second without a synchronisation).
struct Shared {
  Shared(int n, double timeout) : meet(n, timeout), timeout_seconds(timeout) {}
  Rendezvous meet;
  double timeout_seconds;
  std::vector<const cuda::Context*> ctx;
  unsigned* counters = nullptr;  // device
  int* words = nullptr;          // host, mapped: [0] abort, [1] failure
  int* device_words = nullptr;   // the same, as the device sees them
  ~Shared() {
    if (counters != nullptr) cudaFree(counters);
    if (words != nullptr) cudaFreeHost(words);
  }
  volatile int& abort_word() const { return const_cast<volatile int&>(words[0]); }
  volatile int& failure_word() const { return const_cast<volatile int&>(words[1]); }
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
    const std::vector<const Tensor*> all = post(in);
    const size_t width = static_cast<size_t>(n) * scalar_size(in.type);
    for (int r = 0; r < N; ++r) {
      const Tensor& src = *all[static_cast<size_t>(r)];
      DG_CHECK(src.numel() == in.numel() && src.type == in.type);
      if (rows > 0 && width > 0)
        CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(out.data) + static_cast<size_t>(r) * width,
                                     width * static_cast<size_t>(N), src.data, width, width,
                                     static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream()));
    }
    read_done();
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
    const std::vector<const Tensor*> all = post(t);
    cuda::RankPointers p{};
    for (int r = 0; r < size(); ++r) {
      DG_CHECK(all[static_cast<size_t>(r)]->numel() == t.numel() &&
               all[static_cast<size_t>(r)]->type == t.type);
      p.p[r] = all[static_cast<size_t>(r)]->data;
    }
    cuda::launch_sum_ranks(p, size(), type, t.numel(), sum.data, ctx().stream);
    read_done();
    if (t.nbytes() > 0)
      CUDA_CHECK(cudaMemcpyAsync(t.data, sum.data, t.nbytes(), cudaMemcpyDeviceToDevice, stream()));
  }

  void barrier() override {
    activate();
    CUDA_CHECK(cudaStreamSynchronize(stream()));
    s_->meet.arrive(rank_);
  }

 private:
  const cuda::Context& ctx() const { return *s_->ctx[static_cast<size_t>(rank_)]; }
  cudaStream_t stream() const { return ctx().stream; }
  void activate() const { CUDA_CHECK(cudaSetDevice(ctx().device)); }

  // Meets the other ranks' threads (every rank's tensor, by rank), then the streams: this rank's later
  // work runs after every rank's work so far, its input included.
  std::vector<const Tensor*> post(const Tensor& mine) {
    activate();
    healthy();
    const std::vector<const void*> posted = s_->meet.exchange(rank_, &mine);
    std::vector<const Tensor*> all(posted.size());
    for (size_t r = 0; r < posted.size(); ++r) all[r] = static_cast<const Tensor*>(posted[r]);
    streams_meet();
    return all;
  }

  // After this rank's reads are queued: no rank's thread leaves the operation (its posted tensor) before
  // every rank has queued its reads, and no rank's stream goes on (and overwrites its input) before
  // every rank's reads have run.
  void read_done() {
    s_->meet.arrive(rank_);
    streams_meet();
  }

  void streams_meet() {
    cuda::launch_rank_barrier(s_->counters, rank_, size(), s_->device_words, s_->device_words + 1,
                              s_->timeout_seconds, ctx().stream);
  }

  // Throws when an earlier meeting of the streams stopped without the others (their data was not read).
  void healthy() const {
    const int failed = s_->failure_word();
    if (failed != 0)
      fail(ErrorKind::kInternal, "the one-device collective failed: a rank's stream {}",
           failed == cuda::kBarrierAborted ? "was aborted while waiting for the others"
                                           : "waited for the others longer than the timeout");
  }

  std::shared_ptr<Shared> s_;
  int rank_;
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
    CUDA_CHECK(cudaMalloc(&s_->counters, sizeof(unsigned) * cuda::kMaxRanks));
    CUDA_CHECK(cudaMemset(s_->counters, 0, sizeof(unsigned) * cuda::kMaxRanks));
    CUDA_CHECK(cudaHostAlloc(&s_->words, 2 * sizeof(int), cudaHostAllocMapped));
    s_->words[0] = s_->words[1] = 0;
    CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&s_->device_words), s_->words, 0));
    CUDA_CHECK(cudaDeviceSynchronize());  // the counters are zero before any rank's stream counts
    for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<DeviceCollective>(s_, r));
  }
  int size() const override { return s_->meet.size(); }
  Collective& rank(int r) override { return *ranks_.at(static_cast<size_t>(r)); }
  void abort() override {
    s_->abort_word() = 1;  // the streams waiting in a meeting stop
    s_->meet.abort("another rank failed");
  }
  // No rank may be inside an operation; the streams' work is waited for, then every counter is zero.
  void reset() override {
    for (const cuda::Context* c : s_->ctx) c->sync();
    CUDA_CHECK(cudaMemset(s_->counters, 0, sizeof(unsigned) * cuda::kMaxRanks));
    CUDA_CHECK(cudaDeviceSynchronize());
    s_->abort_word() = 0;
    s_->failure_word() = 0;
    s_->meet.reset();
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
