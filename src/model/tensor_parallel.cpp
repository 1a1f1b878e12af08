#include "model/tensor_parallel.h"

#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "backend/thread_collective.h"
#include "model/weight_upload.h"
#include "util/error.h"
#include "util/fatal_error.h"

namespace dgemma {

std::unique_ptr<TensorParallelModel> TensorParallelModel::cpu(const ModelConfig& config, ModelWeights full,
                                                              int size,
                                                              std::unique_ptr<CollectiveGroup> group,
                                                              double return_seconds) {
  validate_tensor_parallel(config, size);
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<ModelWeights> weights;
  for (int r = 0; r < size; ++r) {
    backends.push_back(make_cpu_backend());
    weights.push_back(shard_weights(full, config, ShardPlan{r, size}));
  }
  if (!group) group = std::make_unique<ThreadCollectiveGroup>(size);
  auto tp = std::make_unique<TensorParallelModel>(std::move(backends), std::move(group), config,
                                                  std::move(weights), return_seconds);
  // The ranks' fused projections are copies of their slices (shard_weights): the full ones are not
  // needed any more (a rank's views keep alive whatever they point into).
  for (LayerWeights& l : full.layers) l.qkv_proj = l.mlp_gate_up = Weight();
  full.sc_gate_up = Tensor();
  tp->full_ = std::move(full);
  return tp;
}

std::unique_ptr<TensorParallelModel> TensorParallelModel::upload(
    const ModelConfig& config, const ModelWeights& full, std::vector<std::unique_ptr<Backend>> backends,
    std::unique_ptr<CollectiveGroup> group) {
  const int size = static_cast<int>(backends.size());
  validate_tensor_parallel(config, size);
  std::vector<ModelWeights> weights;
  for (int r = 0; r < size; ++r)
    weights.push_back(upload_model_weights(shard_weights(full, config, ShardPlan{r, size}),
                                           *backends[static_cast<size_t>(r)]));
  return std::make_unique<TensorParallelModel>(std::move(backends), std::move(group), config,
                                               std::move(weights));
}

TensorParallelModel::TensorParallelModel(std::vector<std::unique_ptr<Backend>> backends,
                                         std::unique_ptr<CollectiveGroup> group, const ModelConfig& config,
                                         std::vector<ModelWeights> rank_weights, double return_seconds)
    : backends_(std::move(backends)), group_(std::move(group)), return_seconds_(return_seconds) {
  const int n = static_cast<int>(backends_.size());
  DG_CHECK(n >= 1 && group_ && group_->size() == n && static_cast<int>(rank_weights.size()) == n);
  validate_tensor_parallel(config, n);
  for (int r = 0; r < n; ++r) {
    TensorParallelRank tp{ShardPlan{r, n}, n > 1 ? &group_->rank(r) : nullptr};
    ranks_.push_back(std::make_unique<DiffusionGemma>(config, std::move(rank_weights[static_cast<size_t>(r)]),
                                                      *backends_[static_cast<size_t>(r)], tp));
  }
}

TensorParallelModel::~TensorParallelModel() = default;

namespace {

// What the rank threads of one run() share; a rank left running keeps it (and its copy of fn) alive.
struct RunState {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> returned;
  int count = 0;
  int failed_rank = -1;  // the first rank that threw
  std::string why;
};

std::string error_text(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

void TensorParallelModel::run(const std::function<void(int)>& fn) {
  if (!failure_.empty()) throw FatalError(failure_);
  const int n = size();
  auto st = std::make_shared<RunState>();
  st->returned.assign(static_cast<size_t>(n), false);
  CollectiveGroup* group = group_.get();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([st, group, fn, r] {
      std::exception_ptr err;
      try {
        fn(r);
      } catch (...) {
        err = std::current_exception();
      }
      if (err) {
        {
          std::lock_guard<std::mutex> lock(st->mu);
          if (st->failed_rank < 0) {
            st->failed_rank = r;
            st->why = error_text(err);
          }
        }
        group->abort();  // wakes the ranks waiting for this one in a collective
      }
      std::lock_guard<std::mutex> lock(st->mu);
      st->returned[static_cast<size_t>(r)] = true;
      ++st->count;
      st->cv.notify_all();
    });
  std::unique_lock<std::mutex> lock(st->mu);
  st->cv.wait(lock, [&] { return st->count > 0; });
  const bool all_back =
      st->cv.wait_for(lock, std::chrono::duration<double>(return_seconds_), [&] { return st->count == n; });
  std::string missing;
  for (int r = 0; r < n; ++r) {
    if (st->returned[static_cast<size_t>(r)]) {
      threads[static_cast<size_t>(r)].join();  // it has returned: joins at once
    } else {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      threads[static_cast<size_t>(r)].detach();
    }
  }
  std::string group_failure;
  if (all_back && st->failed_rank < 0) {
    lock.unlock();
    group_failure = group_->failure();  // e.g. NCCL aborted the step's operations after they were queued
    if (group_failure.empty()) return;
  }
  if (!group_failure.empty())
    failure_ = "tensor-parallel collective failed: " + group_failure;
  else if (st->failed_rank >= 0)
    failure_ = fmt::format("tensor-parallel rank {} failed: {}", st->failed_rank, st->why);
  else
    failure_ = "tensor-parallel rank(s) " + missing + " did not finish the step";
  if (!all_back) {
    failure_ += fmt::format("; rank(s) {} did not return within {:g} s and were left running", missing,
                            return_seconds_);
    lock.unlock();
    group_->abort();  // ranks still inside a collective leave it
  }
  throw FatalError(failure_);
}

}  // namespace dgemma
