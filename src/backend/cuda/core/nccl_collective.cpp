// NcclCollective (backend/nccl.h): the handful of NCCL entry points dgemma uses, resolved with dlsym
// from the library found at run time. Every queued operation is watched (backend/collective_watchdog.h:
// an event recorded after it; the communicators' asynchronous errors): one that does not complete
// within the group's timeout, or an NCCL error, aborts every communicator and makes every later
// operation throw with the reason instead of hanging. The declarations below are NCCL's stable C ABI (nccl.h
// of NCCL 2: an opaque communicator pointer, int result codes, the data type and reduction enums' values).
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backend/collective_watchdog.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/nccl.h"
#include "util/error.h"

namespace dgemma {
namespace {

using NcclComm = void*;
using NcclResult = int;  // 0: ncclSuccess
constexpr int kNcclInt32 = 2, kNcclUint8 = 1, kNcclFloat32 = 7, kNcclBfloat16 = 9;
constexpr NcclResult kNcclInProgress = 7;
constexpr int kNcclSum = 0;

struct NcclApi {
  NcclResult (*comm_init_all)(NcclComm*, int, const int*) = nullptr;
  NcclResult (*comm_destroy)(NcclComm) = nullptr;
  NcclResult (*comm_abort)(NcclComm) = nullptr;
  NcclResult (*all_gather)(const void*, void*, size_t, int, NcclComm, cudaStream_t) = nullptr;
  NcclResult (*all_reduce)(const void*, void*, size_t, int, int, NcclComm, cudaStream_t) = nullptr;
  const char* (*error_string)(NcclResult) = nullptr;
  NcclResult (*async_error)(NcclComm, NcclResult*) = nullptr;  // optional (older libraries lack it)
  std::string error;  // why loading failed (empty: loaded)
};

// The library's entry points: `library` when given, else the first of the standard names that loads
// (the dynamic loader's search: LD_LIBRARY_PATH, e.g. the libnccl.so.2 PyTorch bundles). The handle
// stays open for the process (dlopen counts references; NCCL keeps state of its own).
std::shared_ptr<const NcclApi> load_nccl(const std::string& library) {
  auto a = std::make_shared<NcclApi>();
  const std::vector<std::string> names =
      library.empty() ? std::vector<std::string>{"libnccl.so.2", "libnccl.so"} : std::vector<std::string>{library};
  void* h = nullptr;
  std::string lib, errors;
  for (const std::string& name : names) {
    h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      lib = name;
      break;
    }
    const char* e = dlerror();
    errors += fmt::format("{}{} ({})", errors.empty() ? "" : "; ", name, e ? e : "?");
  }
  if (h == nullptr) {
    a->error = fmt::format("cannot load {}: put libnccl.so.2 on LD_LIBRARY_PATH or name the library", errors);
    return a;
  }
  auto sym = [&](const char* name, auto& fn) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (fn == nullptr && a->error.empty()) a->error = fmt::format("{} has no {}", lib, name);
  };
  sym("ncclCommInitAll", a->comm_init_all);
  sym("ncclCommDestroy", a->comm_destroy);
  sym("ncclCommAbort", a->comm_abort);
  sym("ncclAllGather", a->all_gather);
  sym("ncclAllReduce", a->all_reduce);
  sym("ncclGetErrorString", a->error_string);
  a->async_error = reinterpret_cast<decltype(a->async_error)>(dlsym(h, "ncclCommGetAsyncError"));
  return a;
}

void check(const NcclApi& api, NcclResult r, const char* what) {
  if (r != 0) fail(ErrorKind::kInternal, "NCCL {} failed: {}", what, api.error_string(r));
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(std::shared_ptr<const NcclApi> api, NcclComm comm, Backend& backend, int rank, int size,
                 CollectiveWatchdog& watchdog)
      : api_(std::move(api)),
        comm_(comm),
        ctx_(cuda::context_of(backend)),
        rank_(rank),
        size_(size),
        watchdog_(watchdog) {}
  ~NcclCollective() override {
    if (scratch_) cudaFree(scratch_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }

  void all_gather_last(const Tensor& in, const Tensor& out) override {
    DG_CHECK(in.device == Device::kCuda && out.device == Device::kCuda && in.type == out.type && in.ndim >= 1);
    DG_CHECK(out.numel() == in.numel() * size_);
    activate();
    healthy();
    const int64_t n = in.dim(-1), rows = n > 0 ? in.numel() / n : 0;
    const size_t es = scalar_size(in.type), bytes = in.nbytes();
    if (rows <= 1) {  // rank-major is already the gathered layout
      call(api_->all_gather(in.data, out.data, bytes, kNcclUint8, comm_, ctx_.stream), "all_gather");
      return;
    }
    // Gathered rank-major into scratch [size, rows, n], then each rank's block to its columns.
    void* tmp = scratch(bytes * static_cast<size_t>(size_));
    call(api_->all_gather(in.data, tmp, bytes, kNcclUint8, comm_, ctx_.stream), "all_gather");
    const size_t width = static_cast<size_t>(n) * es;
    for (int r = 0; r < size_; ++r)
      CUDA_CHECK(cudaMemcpy2DAsync(static_cast<uint8_t*>(out.data) + r * width, width * static_cast<size_t>(size_),
                                   static_cast<uint8_t*>(tmp) + static_cast<size_t>(r) * bytes, width, width,
                                   static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, ctx_.stream));
  }

  void all_reduce_sum(const Tensor& t) override {
    DG_CHECK(t.device == Device::kCuda &&
             (t.type == ScalarType::kBF16 || t.type == ScalarType::kF32 || t.type == ScalarType::kI32));
    activate();
    healthy();
    const int type = t.type == ScalarType::kBF16  ? kNcclBfloat16
                     : t.type == ScalarType::kF32 ? kNcclFloat32
                                                  : kNcclInt32;
    call(api_->all_reduce(t.data, t.data, static_cast<size_t>(t.numel()), type, kNcclSum, comm_, ctx_.stream),
         "all_reduce");
  }

  void barrier() override {
    activate();
    healthy();
    void* one = scratch(sizeof(float));
    call(api_->all_reduce(one, one, 1, kNcclFloat32, kNcclSum, comm_, ctx_.stream), "barrier");
    CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    healthy();
  }

  // The backend's recording; each replay is then watched as a queued operation is (a replay holds
  // the step's collectives).
  std::unique_ptr<StepGraph> capture(Backend& backend, const std::function<void()>& body) override;

  NcclComm comm() const { return comm_; }

 private:
  friend class WatchedGraph;  // a replay is checked and watched as an operation is
  // Throws the group's failure, if any (no operation is queued on an aborted communicator).
  void healthy() const {
    const std::string why = watchdog_.failure();
    if (!why.empty()) fail(ErrorKind::kInternal, "tensor-parallel collective aborted: {}", why);
  }
  // The stream's work so far handed to the watchdog, which fails the group if it does not complete in
  // time.
  void watch(const char* what) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(e, ctx_.stream));
    watchdog_.issued(rank_, e, what);
  }
  void activate() const { CUDA_CHECK(cudaSetDevice(ctx_.device)); }
  // An NCCL call's result: an error fails the whole group (the other ranks stop too) and throws; else
  // the queued operation is handed to the watchdog (not while the stream is being recorded into a
  // graph: the replays are watched instead).
  void call(NcclResult r, const char* what) {
    if (r != 0) {
      const std::string why =
          fmt::format("NCCL {} failed on rank {}: {}", what, rank_, api_->error_string(r));
      watchdog_.fail(why);
      fail(ErrorKind::kInternal, "{}", why);
    }
    if (!ctx_.capturing()) watch(what);
  }
  // A device buffer of at least `bytes`, reused; grown after the stream drained (the old one may be in
  // use). A recorded graph keeps the buffer it was recorded with, so it cannot grow while recording (the
  // engine runs each step once op by op before recording it, which grows it).
  void* scratch(size_t bytes) {
    if (bytes > scratch_bytes_) {
      if (ctx_.capturing())
        fail(ErrorKind::kInternal,
             "the NCCL gather buffer would grow while a CUDA graph is recorded (run the step op by op "
             "first)");
      CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
      if (scratch_) CUDA_CHECK(cudaFree(scratch_));
      scratch_ = nullptr;
      CUDA_CHECK(cudaMalloc(&scratch_, bytes));
      scratch_bytes_ = bytes;
    }
    return scratch_;
  }

  std::shared_ptr<const NcclApi> api_;
  NcclComm comm_;
  const cuda::Context& ctx_;
  int rank_, size_;
  CollectiveWatchdog& watchdog_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
};

// A graph of a rank's step whose every replay the watchdog waits on.
class WatchedGraph final : public StepGraph {
 public:
  WatchedGraph(std::unique_ptr<StepGraph> graph, NcclCollective& rank)
      : graph_(std::move(graph)), rank_(rank) {}
  void replay() override {
    rank_.healthy();
    graph_->replay();
    rank_.watch("a CUDA graph replay");
  }

 private:
  std::unique_ptr<StepGraph> graph_;
  NcclCollective& rank_;
};

std::unique_ptr<StepGraph> NcclCollective::capture(Backend& backend, const std::function<void()>& body) {
  activate();
  healthy();
  std::unique_ptr<StepGraph> graph = backend.capture(body);
  if (graph == nullptr) return nullptr;
  return std::make_unique<WatchedGraph>(std::move(graph), *this);
}

class NcclGroup final : public CollectiveGroup {
 public:
  NcclGroup(std::shared_ptr<const NcclApi> api, const std::vector<Backend*>& backends, double timeout_seconds)
      : api_(std::move(api)),
        backends_(backends),
        watchdog_(static_cast<int>(backends.size()), timeout_seconds, hooks()) {
    std::lock_guard<std::mutex> lock(mu_);  // the watchdog's thread reads ranks_
    init();
  }
  ~NcclGroup() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;  // the watchdog's hooks leave the communicators alone from now on
    for (auto& r : ranks_) api_->comm_destroy(r->comm());
  }
  int size() const override { return static_cast<int>(backends_.size()); }
  Collective& rank(int r) override { return *ranks_.at(static_cast<size_t>(r)); }
  void abort() override { watchdog_.fail("another rank failed"); }
  std::string failure() const override { return watchdog_.failure(); }
  void reset() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!aborted_) return;
      ranks_.clear();  // the aborted communicators are gone
      init();
      aborted_ = false;
    }
    watchdog_.reset();  // outside mu_: the watchdog's thread takes its lock, then (in a hook) mu_
  }

 private:
  CollectiveWatchdog::Hooks hooks() {
    CollectiveWatchdog::Hooks h;
    h.done = [](void* e) { return cudaEventQuery(static_cast<cudaEvent_t>(e)) != cudaErrorNotReady; };
    h.release = [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); };
    if (api_->async_error)
      h.async_error = [this]() -> std::string {
        std::lock_guard<std::mutex> lock(mu_);
        if (aborted_) return "";
        for (size_t r = 0; r < ranks_.size(); ++r) {
          NcclResult state = 0;
          if (api_->async_error(ranks_[r]->comm(), &state) == 0 && state != 0 && state != kNcclInProgress)
            return fmt::format("NCCL reported an error on rank {}: {}", r, api_->error_string(state));
        }
        return "";
      };
    h.abort = [this](const std::string&) {  // wakes ranks blocked in a collective
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return;
      aborted_ = true;
      for (auto& r : ranks_) api_->comm_abort(r->comm());
    };
    return h;
  }

  void init() {
    std::vector<int> devices;
    for (Backend* b : backends_) devices.push_back(cuda::context_of(*b).device);
    std::vector<NcclComm> comms(devices.size());
    check(*api_, api_->comm_init_all(comms.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll");
    for (size_t r = 0; r < comms.size(); ++r)
      ranks_.push_back(std::make_unique<NcclCollective>(api_, comms[r], *backends_[r], static_cast<int>(r),
                                                        size(), watchdog_));
  }

  std::shared_ptr<const NcclApi> api_;
  std::vector<Backend*> backends_;
  std::vector<std::unique_ptr<NcclCollective>> ranks_;
  std::mutex mu_;
  bool aborted_ = false;
  CollectiveWatchdog watchdog_;  // last member: its thread stops before the communicators go
};

}  // namespace

bool nccl_available(std::string* why, const std::string& library) {
  const std::shared_ptr<const NcclApi> a = load_nccl(library);
  if (why) *why = a->error;
  return a->error.empty();
}

std::unique_ptr<CollectiveGroup> make_nccl_group(const std::vector<Backend*>& backends,
                                                 const std::string& library, double timeout_seconds) {
  DG_CHECK(!backends.empty());
  std::shared_ptr<const NcclApi> api = load_nccl(library);
  if (!api->error.empty()) fail(ErrorKind::kUnsupported, "NCCL: {}", api->error);
  return std::make_unique<NcclGroup>(std::move(api), backends, timeout_seconds);
}

}  // namespace dgemma
