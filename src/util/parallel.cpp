#include "util/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace dgemma {
namespace {

class Pool {
 public:
  explicit Pool(int n) {
    for (int i = 0; i < n - 1; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(size_t chunks, const std::function<void(size_t)>& job) {
    std::lock_guard<std::mutex> run_lock(run_mu_);  // one parallel region at a time
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      chunks_ = chunks;
      next_ = 0;
      done_ = 0;
      error_ = nullptr;
      ++generation_;
    }
    cv_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done_ == chunks_; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    for (;;) {
      size_t i;
      const std::function<void(size_t)>* job;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (job_ == nullptr || next_ >= chunks_) return;
        i = next_++;
        job = job_;
      }
      try {
        (*job)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (++done_ == chunks_) done_cv_.notify_all();
    }
  }
  void loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || (generation_ != seen && job_ != nullptr); });
        if (stop_) return;
        seen = generation_;
      }
      work();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mu_, run_mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t chunks_ = 0, next_ = 0, done_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

int default_threads() {
  if (const char* env = std::getenv("DGEMMA_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::atomic<int> g_threads{0};
thread_local bool t_in_parallel = false;  // nested parallel_for runs inline

Pool& pool() {
  static Pool p(g_threads.load() > 0 ? g_threads.load() : default_threads());
  return p;
}

}  // namespace

int parallel_threads() { return pool().size(); }
void set_parallel_threads(int n) { g_threads = n; }

void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn, size_t min_chunk) {
  if (n == 0) return;
  const size_t threads = static_cast<size_t>(pool().size());
  min_chunk = std::max<size_t>(1, min_chunk);
  size_t chunks = std::min(threads * 4, (n + min_chunk - 1) / min_chunk);
  if (chunks <= 1 || threads == 1 || t_in_parallel) {
    fn(0, n);
    return;
  }
  const size_t per = (n + chunks - 1) / chunks;
  chunks = (n + per - 1) / per;
  pool().run(chunks, [&](size_t c) {
    const size_t b = c * per;
    const size_t e = std::min(n, b + per);
    if (b >= e) return;
    const bool was = t_in_parallel;
    t_in_parallel = true;
    try {
      fn(b, e);
    } catch (...) {
      t_in_parallel = was;
      throw;
    }
    t_in_parallel = was;
  });
}

}  // namespace dgemma
