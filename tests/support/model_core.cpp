#include "support/model_core.h"

#include <algorithm>

#include "engine/tp_runner.h"
#include "util/error.h"

namespace dgemma {
namespace {

// A shared pointer that does not own: the harness lends the caller's objects to the runner.
template <typename T>
std::shared_ptr<T> lent(T& object) {
  return std::shared_ptr<T>(std::shared_ptr<T>{}, &object);
}

// The harness's KV pool: the full-attention pages for kv_tokens tokens, the sliding pages every running
// sequence and a step's chunks need.
KvPoolPlan model_core_pool(const ModelConfig& config, const ModelCoreOptions& o) {
  const KvGeometry geo = kv_geometry(config);
  const int64_t step_tokens = std::max(o.max_num_batched_tokens, o.prefill_chunk);
  KvPoolPlan plan;
  if (geo.layers[static_cast<int>(KvGroup::kFull)] > 0)
    plan.pages[static_cast<int>(KvGroup::kFull)] = (o.kv_tokens + geo.page_size - 1) / geo.page_size;
  plan.pages[static_cast<int>(KvGroup::kSliding)] = sliding_pages_needed(geo, o.max_num_seqs, step_tokens);
  plan.full_tokens = plan.pages[static_cast<int>(KvGroup::kFull)] * geo.page_size;
  return plan;
}

}  // namespace

ModelCore::ModelCore(Backend& backend, DiffusionGemma& model, ModelCoreOptions o) : config_(model.config()) {
  const EngineSizing s = sizing(o);
  auto runner = std::make_unique<DiffusionModelRunner>(lent(backend), lent(model), s.kv, o.runner);
  runner_ = runner.get();
  start(s, std::move(runner));
}

ModelCore::ModelCore(TensorParallelModel& tp, ModelCoreOptions o) : config_(tp.config()) {
  const EngineSizing s = sizing(o);
  start(s, std::make_unique<TensorParallelRunner>(lent(tp), s.kv, o.runner));
}

EngineSizing ModelCore::sizing(const ModelCoreOptions& o) const {
  EngineSizing s;
  s.max_num_seqs = o.max_num_seqs;
  s.max_model_len = config_.text.max_position_embeddings;
  s.max_num_batched_tokens = o.max_num_batched_tokens;
  s.prefill_chunk = o.prefill_chunk;
  s.kv = model_core_pool(config_, o);
  s.prefix_caching = o.prefix_caching;
  s.fuse_prefill_tail = o.fuse_prefill_tail;
  return s;
}

void ModelCore::start(const EngineSizing& s, std::unique_ptr<ModelRunner> runner) {
  core_ = EngineCore::create(config_, s, std::move(runner));
  core_->prepare([](uint64_t id) {
    SequenceParams p;
    p.seed = id;
    return p;
  });
  core_->set_trace_sink(&traces_);
}

std::unique_ptr<Sequence> ModelCore::make_sequence(uint64_t id, std::vector<int32_t> prompt,
                                                   SequenceParams params) const {
  return std::make_unique<Sequence>(id, std::move(prompt), std::move(params), config_.canvas_length,
                                    static_cast<int>(config_.text.vocab_size));
}

StepStats ModelCore::step(std::vector<CoreEvent>& events) {
  const StepStats st = core_->step(events);
  if (st.denoise_items + st.encode_items > 0) ++(st.replayed ? graph_steps_ : eager_steps_);
  return st;
}

std::vector<CoreEvent> ModelCore::run(const std::vector<Sequence*>& seqs, int max_steps) {
  for (Sequence* s : seqs) core_->add(s);
  std::vector<CoreEvent> events;
  for (int i = 0; i < max_steps; ++i) {
    if (std::all_of(seqs.begin(), seqs.end(),
                    [](const Sequence* s) { return s->state == Sequence::State::kFinished; }))
      return events;
    step(events);
  }
  throw Error(ErrorKind::kInternal, "ModelCore::run: sequences did not finish");
}

}  // namespace dgemma
