#include "support/tp_fault.h"

#include <atomic>
#include <chrono>
#include <sstream>
#include <thread>
#include <vector>

#include "backend/thread_collective.h"
#include "engine/tp_runner.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "util/error.h"

namespace dgemma {

namespace {

double parse_number(const std::string& key, const std::string& value) {
  try {
    size_t used = 0;
    const double d = std::stod(value, &used);
    if (used == value.size()) return d;
  } catch (const std::exception&) {
  }
  fail_arg("tp-fault: {}={} is not a number", key, value);
}

class FaultyCollective final : public Collective {
 public:
  FaultyCollective(Collective& inner, const TpFaultSpec& spec) : inner_(inner), spec_(spec) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return "faulty " + inner_.name(); }
  void all_gather_last(const Tensor& in, const Tensor& out) override {
    maybe_die("all_gather_last");
    inner_.all_gather_last(in, out);
  }
  void all_reduce_sum(const Tensor& t) override {
    maybe_die("all_reduce_sum");
    inner_.all_reduce_sum(t);
  }
  void barrier() override {
    maybe_die("barrier");
    inner_.barrier();
  }

 private:
  void maybe_die(const char* what) {
    if (inner_.rank() != spec_.rank || ++calls_ != spec_.after) return;
    if (spec_.hang)
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    fail(ErrorKind::kInternal, "injected fault: rank {} died in its {} (collective call {})", spec_.rank,
         what, spec_.after);
  }
  Collective& inner_;
  const TpFaultSpec spec_;
  int calls_ = 0;  // this rank's calls (one thread)
};

class FaultyGroup final : public CollectiveGroup {
 public:
  FaultyGroup(std::unique_ptr<CollectiveGroup> inner, const TpFaultSpec& spec) : inner_(std::move(inner)) {
    for (int r = 0; r < inner_->size(); ++r)
      ranks_.push_back(std::make_unique<FaultyCollective>(inner_->rank(r), spec));
  }
  int size() const override { return inner_->size(); }
  Collective& rank(int r) override { return *ranks_.at(static_cast<size_t>(r)); }
  void abort() override { inner_->abort(); }
  void reset() override { inner_->reset(); }
  std::string failure() const override { return inner_->failure(); }

 private:
  std::unique_ptr<CollectiveGroup> inner_;
  std::vector<std::unique_ptr<FaultyCollective>> ranks_;
};

}  // namespace

TpFaultSpec parse_tp_fault_spec(const std::string& spec) {
  TpFaultSpec s;
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) fail_arg("tp-fault: '{}' is not key=value", item);
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "mode") {
      if (value != "throw" && value != "hang")
        fail_arg("tp-fault: mode must be throw or hang (got '{}')", value);
      s.hang = value == "hang";
    } else if (key == "ranks") {
      s.ranks = static_cast<int>(parse_number(key, value));
    } else if (key == "rank") {
      s.rank = static_cast<int>(parse_number(key, value));
    } else if (key == "after") {
      s.after = static_cast<int>(parse_number(key, value));
    } else if (key == "timeout") {
      s.timeout_seconds = parse_number(key, value);
    } else if (key == "return") {
      s.return_seconds = parse_number(key, value);
    } else {
      fail_arg("tp-fault: unknown key '{}' (ranks, rank, after, mode, timeout, return)", key);
    }
  }
  if (s.ranks != 2 && s.ranks != 4 && s.ranks != 8) fail_arg("tp-fault: ranks must be 2, 4 or 8");
  if (s.rank < 0 || s.rank >= s.ranks) fail_arg("tp-fault: rank must be below ranks");
  if (s.after < 1) fail_arg("tp-fault: after must be at least 1");
  if (!(s.timeout_seconds > 0) || !(s.return_seconds > 0))
    fail_arg("tp-fault: timeout and return must be > 0");
  return s;
}

std::unique_ptr<CollectiveGroup> make_faulty_group(std::unique_ptr<CollectiveGroup> inner,
                                                   const TpFaultSpec& spec) {
  return std::make_unique<FaultyGroup>(std::move(inner), spec);
}

std::unique_ptr<EngineInterface> create_tp_fault_engine(const EngineConfig& config, const TpFaultSpec& spec) {
  EngineConfig c = config;
  c.device = "cpu";
  c.load_format = "dummy";
  c.tensor_parallel_size = spec.ranks;
  return create_engine_with_runner(
      c, std::nullopt,
      [&](const ModelConfig& mc, const GenerationConfig&,
          const KvPoolPlan& pool) -> std::unique_ptr<ModelRunner> {
        std::unique_ptr<Backend> host = make_cpu_backend();
        WeightLoadOptions lo;
        lo.vision = false;
        ModelWeights w = dummy_weights(mc, *host, c.seed, lo);
        auto group = make_faulty_group(
            std::make_unique<ThreadCollectiveGroup>(spec.ranks, spec.timeout_seconds), spec);
        auto tp =
            TensorParallelModel::cpu(mc, std::move(w), spec.ranks, std::move(group), spec.return_seconds);
        RunnerOptions ro;
        ro.batch_buckets = engine_batch_buckets(c.max_num_seqs);
        return std::make_unique<TensorParallelRunner>(std::move(tp), pool, ro);
      });
}

}  // namespace dgemma
