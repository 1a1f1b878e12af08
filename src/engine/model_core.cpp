#include "engine/model_core.h"

#include <algorithm>

#include "engine/tp_runner.h"
#include "util/error.h"

namespace dgemma {

KvPoolPlan ModelCore::pool_plan(const ModelCoreOptions& o) const {
  if (o.kv_plan) return *o.kv_plan;
  const KvGeometry geo = kv_geometry(model_.config());
  const int64_t step_tokens = std::max(o.max_num_batched_tokens, o.prefill_chunk);
  KvPoolPlan plan;
  if (geo.layers[static_cast<int>(KvGroup::kFull)] > 0)
    plan.pages[static_cast<int>(KvGroup::kFull)] = (o.kv_tokens + geo.page_size - 1) / geo.page_size;
  plan.pages[static_cast<int>(KvGroup::kSliding)] = sliding_pages_needed(geo, o.max_num_seqs, step_tokens);
  return plan;
}

ModelCore::ModelCore(DiffusionGemma& model, ModelCoreOptions o) : model_(model) {
  const KvPoolPlan plan = pool_plan(o);
  kv_ = allocate_kv_storage(model.config(), model.backend(), plan);
  auto runner = std::make_unique<DiffusionModelRunner>(model, kv_);
  runner_ = runner.get();
  core_ = make_engine_core(model.config(), o, plan, std::move(runner));
  core_->set_trace_sink(&traces_);
}

ModelCore::ModelCore(TensorParallelModel& tp, ModelCoreOptions o) : model_(tp.rank(0)) {
  const KvPoolPlan plan = pool_plan(o);
  for (int r = 0; r < tp.size(); ++r) rank_kv_.push_back(allocate_kv_storage(tp.config(), tp.backend(r), plan, tp.size()));
  auto runner = std::make_unique<TensorParallelRunner>(tp, rank_kv_);
  runner_ = &runner->rank0();
  core_ = make_engine_core(tp.config(), o, plan, std::move(runner));
  core_->set_trace_sink(&traces_);
}

std::unique_ptr<EngineCore> make_engine_core(const ModelConfig& mc, const ModelCoreOptions& o, const KvPoolPlan& plan,
                                             std::unique_ptr<ModelRunner> runner) {
  const KvGeometry geo = kv_geometry(mc);
  SchedulerConfig sc;
  sc.max_num_seqs = o.max_num_seqs;
  sc.max_num_batched_tokens = o.max_num_batched_tokens;
  sc.prefill_chunk = o.prefill_chunk;
  sc.canvas_length = mc.canvas_length;
  sc.fuse_prefill_tail = o.fuse_prefill_tail;
  BlockManagerConfig bc;
  bc.page_size = geo.page_size;
  bc.num_pages = plan.pages;
  bc.sliding_keep = geo.sliding_keep;
  bc.prefix_caching = o.prefix_caching;
  return std::make_unique<EngineCore>(sc, bc, std::move(runner));
}

std::unique_ptr<Sequence> ModelCore::make_sequence(uint64_t id, std::vector<int32_t> prompt, SequenceParams params) const {
  return std::make_unique<Sequence>(id, std::move(prompt), std::move(params), model_.config().canvas_length,
                                    static_cast<int>(model_.config().text.vocab_size));
}

std::vector<CoreEvent> ModelCore::run(const std::vector<Sequence*>& seqs, int max_steps) {
  for (Sequence* s : seqs) core_->add(s);
  std::vector<CoreEvent> events;
  for (int i = 0; i < max_steps; ++i) {
    if (std::all_of(seqs.begin(), seqs.end(), [](const Sequence* s) { return s->state == Sequence::State::kFinished; }))
      return events;
    core_->step(events);
  }
  throw Error(ErrorKind::kInternal, "ModelCore::run: sequences did not finish");
}

}  // namespace dgemma
