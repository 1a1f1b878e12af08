// The one-device collective (backend/device_collective.h).
#include "backend/device_collective.h"

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <vector>

#include "backend/cuda/core/check.h"
#include "backend/cuda/core/graph.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/parallel/shard_kernels.cuh"
#include "backend/rendezvous.h"
#include "util/error.h"

namespace dgemma {
namespace {

// What the ranks share: the meeting point, each rank's context and its two events ("my input is
// ready", "I have read everyone's").
struct Shared {
  Shared(int n, double timeout) : meet(n, timeout) {}
  Rendezvous meet;
  std::vector<const cuda::Context*> ctx;
  std::vector<cudaEvent_t> ready, done;
  ~Shared() {
    for (cudaEvent_t e : ready) cudaEventDestroy(e);
    for (cudaEvent_t e : done) cudaEventDestroy(e);
  }
};

// One recording of every rank's share of a step: a single CUDA graph (the ranks' streams joined one
// capture, the collectives' event orderings its edges), replayed by rank 0 on its stream.
struct JointGraph {
  std::unique_ptr<StepGraph> graph;  // rank 0's (null until recorded)
  cudaEvent_t fork = nullptr;        // recording: rank 0's capture, which the others join
  std::vector<cudaEvent_t> joins;    // recording: rank r's share done, which rank 0's stream rejoins
  std::vector<cudaEvent_t> before;   // replay: rank r's work so far
  cudaEvent_t after = nullptr;       // replay: the launch
  explicit JointGraph(int n)
      : joins(static_cast<size_t>(n), nullptr), before(static_cast<size_t>(n), nullptr) {
    for (cudaEvent_t* e : events()) CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
  ~JointGraph() {
    for (cudaEvent_t* e : events())
      if (*e != nullptr) cudaEventDestroy(*e);
  }
  JointGraph(const JointGraph&) = delete;
  JointGraph& operator=(const JointGraph&) = delete;

 private:
  std::vector<cudaEvent_t*> events() {
    std::vector<cudaEvent_t*> all{&fork, &after};
    for (cudaEvent_t& e : joins) all.push_back(&e);
    for (cudaEvent_t& e : before) all.push_back(&e);
    return all;
  }
};

// Rank r's handle on a joint graph. The ranks replay together, each on its own thread: every rank's
// stream marks its work so far, rank 0's stream waits for all of them and replays the graph, and every
// rank's stream waits for the replay. Each wait is on work already queued, so no stream can wait on
// a rank whose thread has yet to come.
class JointReplay final : public StepGraph {
 public:
  JointReplay(std::shared_ptr<Shared> s, std::shared_ptr<JointGraph> g, int rank)
      : s_(std::move(s)), g_(std::move(g)), rank_(rank) {}
  void replay() override {
    const cuda::Context& c = *s_->ctx[static_cast<size_t>(rank_)];
    CUDA_CHECK(cudaSetDevice(c.device));
    CUDA_CHECK(cudaEventRecord(g_->before[static_cast<size_t>(rank_)], c.stream));
    s_->meet.arrive(rank_);
    if (rank_ == 0) {
      for (cudaEvent_t e : g_->before) CUDA_CHECK(cudaStreamWaitEvent(c.stream, e, 0));
      g_->graph->replay();
      CUDA_CHECK(cudaEventRecord(g_->after, c.stream));
    }
    s_->meet.arrive(rank_);
    if (rank_ != 0) CUDA_CHECK(cudaStreamWaitEvent(c.stream, g_->after, 0));
  }

 private:
  std::shared_ptr<Shared> s_;
  std::shared_ptr<JointGraph> g_;
  int rank_;
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

  // One joint recording (JointGraph): rank 0 starts capturing its stream and every other rank's stream
  // joins the capture through an event; each rank's work, collectives included, goes into the one
  // graph from its own thread; the other ranks' streams rejoin rank 0's, which ends the capture. Every
  // rank's recorded allocations come from its own graph pool. The backend argument must be this
  // rank's (its stream is the one recorded).
  std::unique_ptr<StepGraph> capture(Backend& backend, const std::function<void()>& body) override {
    DG_CHECK(&cuda::context_of(backend) == &ctx());
    activate();
    ctx().sync();  // nothing of earlier work may end up in the recording
    s_->meet.arrive(rank_);
    std::shared_ptr<JointGraph> made;
    if (rank_ == 0) {
      made = std::make_shared<JointGraph>(size());
      CUDA_CHECK(cudaStreamBeginCapture(stream(), cudaStreamCaptureModeRelaxed));
      CUDA_CHECK(cudaEventRecord(made->fork, stream()));
    }
    const std::shared_ptr<JointGraph> g =
        *static_cast<const std::shared_ptr<JointGraph>*>(s_->meet.exchange(rank_, &made)[0]);
    std::string error;
    if (rank_ != 0) CUDA_CHECK(cudaStreamWaitEvent(stream(), g->fork, 0));
    ctx().allocator->begin_graph_pool();
    try {
      body();
    } catch (const std::exception& e) {
      error = e.what();
    }
    ctx().allocator->end_graph_pool();
    if (rank_ != 0) CUDA_CHECK(cudaEventRecord(g->joins[static_cast<size_t>(rank_)], stream()));
    bool met = true;
    try {
      s_->meet.arrive(rank_);
    } catch (const std::exception& e) {
      met = false;
      if (error.empty()) error = e.what();
    }
    if (rank_ == 0) {  // ends the capture whatever happened
      if (met && error.empty()) {
        for (int r = 1; r < size(); ++r)
          CUDA_CHECK(cudaStreamWaitEvent(stream(), g->joins[static_cast<size_t>(r)], 0));
        try {
          g->graph = cuda::end_capture(ctx());
        } catch (const std::exception& e) {
          error = e.what();
        }
      } else {
        cuda::abandon_capture(ctx());
      }
    }
    if (!met) fail(ErrorKind::kInternal, "{}", error);
    s_->meet.arrive(rank_);  // rank 0 has made the graph, or failed to
    if (!error.empty()) fail(ErrorKind::kInternal, "{}", error);
    if (g->graph == nullptr)
      fail(ErrorKind::kInternal, "rank 0 could not record the ranks' step as a CUDA graph");
    return std::make_unique<JointReplay>(s_, g, rank_);
  }

 private:
  const cuda::Context& ctx() const { return *s_->ctx[static_cast<size_t>(rank_)]; }
  cudaStream_t stream() const { return ctx().stream; }
  void activate() const { CUDA_CHECK(cudaSetDevice(ctx().device)); }

  // Marks this rank's input ready on its stream, meets the others, and orders this rank's stream after
  // every rank's input. Returns every rank's tensor.
  std::vector<const Tensor*> post(const Tensor& mine) {
    activate();
    CUDA_CHECK(cudaEventRecord(s_->ready[static_cast<size_t>(rank_)], stream()));
    const std::vector<const void*> posted = s_->meet.exchange(rank_, &mine);
    std::vector<const Tensor*> all(posted.size());
    for (size_t r = 0; r < posted.size(); ++r) {
      all[r] = static_cast<const Tensor*>(posted[r]);
      if (static_cast<int>(r) != rank_) CUDA_CHECK(cudaStreamWaitEvent(stream(), s_->ready[r], 0));
    }
    return all;
  }

  // After this rank's reads are queued: no rank's stream goes on (and overwrites its input) before
  // every rank has read it. A rank records its "done" event again only after the next meeting, which
  // every other rank reaches after queueing its wait on it.
  void read_done() {
    CUDA_CHECK(cudaEventRecord(s_->done[static_cast<size_t>(rank_)], stream()));
    s_->meet.arrive(rank_);
    for (int r = 0; r < size(); ++r)
      if (r != rank_) CUDA_CHECK(cudaStreamWaitEvent(stream(), s_->done[static_cast<size_t>(r)], 0));
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
    s_->ready.resize(static_cast<size_t>(n));
    s_->done.resize(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      CUDA_CHECK(cudaEventCreateWithFlags(&s_->ready[static_cast<size_t>(r)], cudaEventDisableTiming));
      CUDA_CHECK(cudaEventCreateWithFlags(&s_->done[static_cast<size_t>(r)], cudaEventDisableTiming));
      ranks_.push_back(std::make_unique<DeviceCollective>(s_, r));
    }
  }
  int size() const override { return s_->meet.size(); }
  Collective& rank(int r) override { return *ranks_.at(static_cast<size_t>(r)); }
  void abort() override { s_->meet.abort("another rank failed"); }
  void reset() override { s_->meet.reset(); }

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
