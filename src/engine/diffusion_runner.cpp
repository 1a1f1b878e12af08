#include "engine/diffusion_runner.h"

#include <algorithm>

#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {

DiffusionModelRunner::DiffusionModelRunner(std::shared_ptr<Backend> backend,
                                           std::shared_ptr<DiffusionGemma> model, const KvPoolPlan& pool,
                                           RunnerOptions options)
    : backend_(std::move(backend)),
      model_(std::move(model)),
      options_(std::move(options)),
      canvas_(model_->config().canvas_length),
      vocab_(static_cast<int>(model_->config().text.vocab_size)),
      plan_context_(options_.plan_context) {
  DG_CHECK(backend_ && model_ && !options_.batch_buckets.empty());
  kv_ = allocate_kv_storage(model_->config(), *backend_, pool, model_->tensor_parallel().plan.size);
}

DiffusionModelRunner::DeviceState DiffusionModelRunner::new_state(bool soft) {
  Backend& be = *backend_;
  DeviceState d;
  d.canvas = be.alloc(ScalarType::kI32, {canvas_});
  d.prev_argmax = be.alloc(ScalarType::kI32, {canvas_});
  d.entropy = be.alloc(ScalarType::kF32, {canvas_});
  d.sample = be.alloc(ScalarType::kI32, {canvas_});
  d.logprob = be.alloc(ScalarType::kF32, {canvas_});
  if (soft) d.soft = be.alloc(ScalarType::kBF16, {canvas_, model_->config().text.hidden_size});
  return d;
}

DiffusionModelRunner::DeviceState& DiffusionModelRunner::state_of(const Sequence& seq) {
  auto it = state_.find(seq.id());
  if (it != state_.end()) return it->second;
  return state_.emplace(seq.id(), new_state(true)).first->second;
}

Tensor DiffusionModelRunner::sampler_logits(int64_t i) const {
  const int64_t C = canvas_;
  return model_->gathers_vocabulary() ? sampled_.rows(i * C, (i + 1) * C) : logits_.rows(i * C, (i + 1) * C);
}

DiffusionModelRunner::DeviceState& DiffusionModelRunner::idle_state(int k) {
  while (static_cast<int>(idle_.size()) <= k) {
    DeviceState d = new_state(false);  // no soft buffer: an idle canvas's rows are never scattered
    const std::vector<int32_t> zeros(static_cast<size_t>(canvas_), 0);  // token 0: any valid id does
    backend_->from_host(d.canvas, zeros.data());
    idle_.push_back(std::move(d));
  }
  return idle_[static_cast<size_t>(k)];
}

void DiffusionModelRunner::ensure_step_buffers(int64_t canvases) {
  Backend& be = *backend_;
  const int64_t C = canvas_;
  if (logits_.empty() || logits_.dim(0) < canvases * C) {
    DG_CHECK(graphs_.empty());  // recorded steps read the buffers they were recorded with
    logits_ = Tensor{};         // back to the allocator before the larger one is taken
    logits_ = be.alloc(ScalarType::kBF16, {canvases * C, model_->logits_columns()});
    if (model_->gathers_vocabulary()) {
      sampled_ = Tensor{};
      sampled_ = be.alloc(ScalarType::kBF16, {canvases * C, model_->config().text.vocab_size});
    }
  }
  if (out_.empty() || out_.dim(0) < canvases) {
    DG_CHECK(graphs_.empty());
    out_ = be.alloc(ScalarType::kI32, {canvases, 2 + C});
  }
}

void DiffusionModelRunner::add_idle_canvas(Step& step, int k) {
  // No cache, greedy (no noise drawn); its results land in its own buffers and out_'s row k.
  DeviceState& d = idle_state(k);
  const int64_t C = canvas_;
  ForwardItem fi;
  fi.kind = ForwardItem::Kind::kDenoise;
  fi.plan_cached = plan_context_;
  fi.token_ids = d.canvas;
  fi.logits = logits_.rows(k * C, (k + 1) * C);
  step.items.push_back(fi);
  step.canvases.push_back(&d);
  step.seqs.push_back(nullptr);
  step.soft_out.push_back(d.soft);  // empty: address 0, not scattered
  const Tensor row = out_.rows(k, k + 1).reshape({2 + C});
  d.argmax = borrow_tensor(row.ptr<int32_t>() + 2, ScalarType::kI32, {C}, row.device);
  SamplerArgs sa;
  sa.logits = sampler_logits(k);
  sa.softcap = static_cast<float>(model_->config().text.final_logit_softcapping);
  sa.want_sample = false;
  sa.entropy = d.entropy;
  sa.argmax = d.argmax;
  sa.sample = d.sample;
  sa.argmax_logprob = d.logprob;
  step.sampling.push_back(sa);
  DecideArgs da;
  da.entropy = d.entropy;
  da.argmax = d.argmax;
  da.sample = d.sample;
  da.greedy = true;
  da.vocab = vocab_;
  da.prev_argmax = d.prev_argmax;
  da.canvas = d.canvas;
  da.flags = borrow_tensor(row.ptr<int32_t>(), ScalarType::kI32, {2}, row.device);
  step.deciding.push_back(da);
}

bool DiffusionModelRunner::graphable(const Step& step, bool dumping) const {
  if (step.canvases.empty() || step.items.size() != step.canvases.size() || dumping) return false;
  for (const Sequence* s : step.seqs)
    if (s != nullptr &&
        (!s->canvas_pins().empty() || (backend_->supports_guided_gaps() && !s->guided_segment().empty())))
      return false;
  for (const SamplerArgs& a : step.sampling)
    if (a.filter.active() || a.top_n > 0) return false;
  return true;
}

int64_t DiffusionModelRunner::table_room(int b) const {
  const int64_t pages = (plan_context_ + canvas_ - 1) / canvas_ + 1;  // a page per canvas of the context
  return int64_t{b} * kKvGroups * pages;
}

StepInputs DiffusionModelRunner::encode(const Step& step, int64_t table_words) const {
  return encode_step_inputs(model_->forward_shape(), *backend_, step.items, table_words, step.soft_out,
                            step.sampling, step.deciding);
}

void DiffusionModelRunner::execute(Step& step, const StepInputs& in, const Tensor& block,
                                   const DumpHook& dump) {
  DiffusionGemma& model = *model_;
  Backend& be = *backend_;
  model.forward(step.items, kv_, in.forward, block, dump);
  const int64_t N = static_cast<int64_t>(step.canvases.size());
  if (N == 0) return;
  // All canvases at once: one sampler, one self-conditioning GEMM (its rows scattered to each canvas's
  // soft buffer), one decide.
  const int64_t C = canvas_, H = model.config().text.hidden_size;
  if (model.gathers_vocabulary()) model.gather_vocabulary(logits_.rows(0, N * C), sampled_.rows(0, N * C));
  model.sampler_batch_encoded(step.sampling, block.rows(in.sampler_at, in.decide_at));
  // The rank's columns of the probabilities the whole-vocabulary sampler wrote.
  if (model.gathers_vocabulary())
    be.copy_columns(logits_.rows(0, N * C), sampled_.rows(0, N * C), model.vocab_first());
  Tensor soft = be.alloc(ScalarType::kBF16, {N * C, H});
  model.soft_embeddings(logits_.rows(0, N * C), soft);  // probs . E * embed_scale
  be.scatter_blocks(soft, block.rows(in.soft_out_at, in.soft_out_at + 2 * N), N, C * H * 2);
  // Pinned positions feed their one-hot token instead of their softmax row.
  for (int64_t i = 0; i < N; ++i) {
    const Sequence* s = step.seqs[static_cast<size_t>(i)];
    if (s == nullptr) continue;
    const DeviceState& d = *step.canvases[static_cast<size_t>(i)];
    for (const auto& [b, e] : s->canvas_pins().runs)
      model.one_hot_soft_embeddings(d.pin_tokens.rows(b, e), d.soft.rows(b, e));
  }
  be.decide_batch_encoded(step.deciding, block.rows(in.decide_at, in.words));
}

void DiffusionModelRunner::enable_graphs(const std::vector<int>& buckets) {
  Backend& be = *backend_;
  if (!be.supports_graphs() || buckets.empty()) return;
  DG_CHECK(graphs_.empty() && plan_context_ > 0 && std::is_sorted(buckets.begin(), buckets.end()) &&
           buckets.front() >= 1);
  ensure_step_buffers(buckets.back());
  // One idle step of b canvases per bucket, largest first (its memory is what the smaller ones reuse):
  // run once op by op (kernels load, cuBLAS picks its kernels, the caches fill), then recorded.
  std::vector<Graph> made;
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    const int b = *it;
    Step step;
    for (int k = 0; k < b; ++k) add_idle_canvas(step, k);
    Graph g;
    g.canvases = b;
    const StepInputs in = encode(step, table_room(b));
    g.words = in.words;
    if (graph_block_.empty()) graph_block_ = be.alloc(ScalarType::kI32, {in.words});  // the largest layout
    DG_CHECK(in.words <= graph_block_.numel());
    const Tensor block = graph_block_.rows(0, in.words);
    be.from_host(block, in.forward.words.data());
    execute(step, in, block, {});
    be.synchronize();
    // A rank of a tensor-parallel model records through its collective (every rank at once).
    Collective* collective = model_->tensor_parallel().collective;
    auto body = [&] { execute(step, in, block, {}); };
    g.graph = collective != nullptr ? collective->capture(be, body) : be.capture(body);
    if (!g.graph) return;
    made.push_back(std::move(g));
  }
  std::reverse(made.begin(), made.end());
  graphs_ = std::move(made);
}

std::vector<int> DiffusionModelRunner::graph_batches() const {
  std::vector<int> sizes;
  for (const Graph& g : graphs_) sizes.push_back(g.canvases);
  return sizes;
}

DumpHook DiffusionModelRunner::step_dump_hook() {
  const int64_t step = steps_++;
  if (!options_.step_dump) return nullptr;
  DumpHook hook = options_.step_dump(step);
  if (!hook) return nullptr;
  // The hook gets host copies, whatever the backend.
  return [be = backend_, hook](const std::string& name, const Tensor& t) {
    if (t.device == Device::kCpu) return hook(name, t);
    Tensor h = host_tensor(t.type, {t.numel()});
    be->to_host(t, h.data);
    h.ndim = t.ndim;
    h.shape = t.shape;
    hook(name, h);
  };
}

StepResult DiffusionModelRunner::run(const StepPlan& plan) {
  Backend& be = *backend_;
  int64_t n_denoise = 0;
  for (const PlannedItem& p : plan.items) n_denoise += p.kind == PlannedItem::Kind::kDenoise ? 1 : 0;
  const int64_t C = canvas_;
  if (n_denoise > 0) ensure_step_buffers(n_denoise);
  // Encode items first, then the denoising canvases (each list in plan order): a sequence's encode
  // item precedes its denoise item either way, and the canvases' logits rows are then adjacent, so
  // the forward gives them one LM-head GEMM.
  Step step;
  std::vector<ForwardItem> denoise_items;
  step.items.reserve(plan.items.size());
  for (const PlannedItem& p : plan.items) {
    const Sequence& s = *p.seq;
    ForwardItem it;
    for (int g = 0; g < kKvGroups; ++g) it.kv.tables[g] = s.blocks.tables[g];
    if (p.kind == PlannedItem::Kind::kEncode) {
      it.kind = ForwardItem::Kind::kEncode;
      it.tokens = std::span<const int32_t>(s.history())
                      .subspan(static_cast<size_t>(p.begin), static_cast<size_t>(p.end - p.begin));
      it.kv.cached = p.begin;
      // The chunk's images (a chunk holds an image block whole or not at all).
      for (size_t m = 0; m < s.images().size(); ++m) {
        const PromptImage& im = s.images()[m];
        if (im.first < p.begin || im.first >= p.end) continue;
        DG_CHECK(im.first + s.image_soft_tokens(m) <= p.end);
        it.images.push_back({im.first - p.begin, VisionImageInput{im.grid_h, im.grid_w, *im.patches}});
      }
      step.items.push_back(it);
      continue;
    }
    DeviceState& d = state_of(s);
    if (s.step() == 0) {
      const std::vector<int32_t> canvas = s.initial_canvas();
      be.from_host(d.canvas, canvas.data());
      const CanvasPins& pins = s.canvas_pins();
      if (!pins.empty()) {
        if (d.pin_mask.empty()) {
          d.pin_mask = be.alloc(ScalarType::kU8, {canvas_});
          d.pin_tokens = be.alloc(ScalarType::kI32, {canvas_});
        }
        be.from_host(d.pin_mask, pins.mask.data());
        be.from_host(d.pin_tokens, pins.tokens.data());
      }
    }
    if (s.params().trace) {
      d.canvas_in.resize(static_cast<size_t>(canvas_));
      be.to_host(d.canvas, d.canvas_in.data());
    }
    const int64_t i = static_cast<int64_t>(step.canvases.size());
    it.kind = ForwardItem::Kind::kDenoise;
    it.kv.cached = static_cast<int64_t>(s.history().size());
    it.plan_cached = plan_context_ > 0 ? plan_context_ : -1;
    it.soft_embeds = s.step() > 0 ? d.soft : Tensor{};  // the previous step of this canvas wrote it
    it.logits = logits_.rows(i * C, (i + 1) * C);
    it.token_ids = d.canvas;
    denoise_items.push_back(it);
    step.canvases.push_back(&d);
    step.seqs.push_back(&s);
    step.soft_out.push_back(d.soft);
  }
  step.items.insert(step.items.end(), denoise_items.begin(), denoise_items.end());
  StepResult result;
  if (step.items.empty()) return result;
  const DumpHook dump = step_dump_hook();

  // Each canvas's sampler and decide arguments: its row i of out_ receives {flags[2], argmax[C]}.
  const int64_t N = static_cast<int64_t>(step.canvases.size());
  guided_.begin_step();
  for (int64_t i = 0; i < N; ++i) {
    DeviceState& d = *step.canvases[static_cast<size_t>(i)];
    const Sequence& seq = *step.seqs[static_cast<size_t>(i)];
    const Tensor row = out_.rows(i, i + 1).reshape({2 + C});
    d.argmax = borrow_tensor(row.ptr<int32_t>() + 2, ScalarType::kI32, {C}, row.device);
    d.argmax.owner = out_.owner;
    step.sampling.push_back(sampler_args(seq, d, sampler_logits(i)));
    step.deciding.push_back(
        decide_args(seq, d, borrow_tensor(row.ptr<int32_t>(), ScalarType::kI32, {2}, row.device)));
  }

  // The smallest recorded batch that holds the step, padded with idle canvases.
  const Graph* graph = nullptr;
  if (graphable(step, static_cast<bool>(options_.step_dump)))
    for (const Graph& g : graphs_)
      if (g.canvases >= N) {
        graph = &g;
        break;
      }
  if (graph != nullptr) {
    for (int64_t k = N; k < graph->canvases; ++k) add_idle_canvas(step, static_cast<int>(k));
    const StepInputs in = encode(step, table_room(graph->canvases));
    DG_CHECK(in.words == graph->words);  // the layout recorded
    be.from_host(graph_block_.rows(0, in.words), in.forward.words.data());
    graph->graph->replay();
    result.replayed = true;
  } else {
    const StepInputs in = encode(step, 0);
    Tensor block = be.alloc(ScalarType::kI32, {in.words});
    be.from_host(block, in.forward.words.data());
    execute(step, in, block, dump);
  }
  if (N == 0) return result;

  // One read of every canvas's flags and argmax row.
  std::vector<int32_t> values(static_cast<size_t>(N * (2 + C)));
  be.to_host(out_.rows(0, N), values.data());
  result.canvases.reserve(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    result.canvases.push_back(result_of(*step.seqs[static_cast<size_t>(i)],
                                        *step.canvases[static_cast<size_t>(i)], values.data() + i * (2 + C)));
  return result;
}

CanvasResult DiffusionModelRunner::result_of(const Sequence& seq, DeviceState& d, const int32_t* values) {
  Backend& be = *backend_;
  const SequenceParams& sp = seq.params();
  const size_t C = static_cast<size_t>(canvas_);
  CanvasResult r;
  r.flags = {values[0] != 0, values[1] != 0};
  r.argmax.assign(values + 2, values + 2 + C);
  // The commit's outputs only on the canvas's last step.
  const bool last = seq.last_step(r.flags.same_argmax, r.flags.confident);
  if (last && sp.logprobs) {
    r.logprobs.resize(C);
    be.to_host(d.logprob, r.logprobs.data());
  }
  if (last && sp.top_logprobs > 0) {
    r.top.n = static_cast<int>(d.top_ids.dim(1));
    r.top.ids.resize(static_cast<size_t>(d.top_ids.numel()));
    r.top.logprobs.resize(r.top.ids.size());
    be.to_host(d.top_ids, r.top.ids.data());
    be.to_host(d.top_logprobs, r.top.logprobs.data());
  }
  if (sp.previews) {
    r.entropy.resize(C);
    be.to_host(d.entropy, r.entropy.data());
    r.accepted.resize(C);
    be.to_host(d.accept, r.accepted.data());
  }
  if (sp.trace) r.trace = trace_of(seq, d, r.argmax, last);
  return r;
}

StepRecord DiffusionModelRunner::trace_of(const Sequence& seq, DeviceState& d, std::vector<int32_t> argmax,
                                          bool stop) {
  Backend& be = *backend_;
  const size_t C = static_cast<size_t>(canvas_);
  auto i32 = [&](const Tensor& t) {
    std::vector<int32_t> v(C);
    be.to_host(t, v.data());
    return v;
  };
  auto f32 = [&](const Tensor& t) {
    std::vector<float> v(C);
    be.to_host(t, v.data());
    return v;
  };
  StepRecord r;
  r.canvas_in = d.canvas_in;
  r.sample = seq.params().greedy ? argmax : i32(d.sample);
  r.argmax = std::move(argmax);
  r.canvas_out = i32(d.canvas);
  r.entropy = f32(d.entropy);
  r.accept.resize(C);
  be.to_host(d.accept, r.accept.data());
  r.temperature = seq.temperature();
  r.stop = stop;
  r.argmax_gap = f32(d.argmax_gap);
  r.sample_gap = f32(d.sample_gap);
  r.accept_margin = entropy_bound_margins(r.entropy, static_cast<float>(seq.params().diffusion.entropy_bound),
                                          seq.canvas_pins().mask);
  return r;
}

SamplerArgs DiffusionModelRunner::sampler_args(const Sequence& seq, DeviceState& d, const Tensor& logits) {
  Backend& be = *backend_;
  const SequenceParams& sp = seq.params();
  SamplerArgs sa;
  sa.logits = logits;
  sa.softcap = static_cast<float>(model_->config().text.final_logit_softcapping);
  sa.temperature = seq.temperature();
  sa.sample_key = rng::stream_key(sp.seed, static_cast<uint64_t>(seq.canvas_index()),
                                  static_cast<uint64_t>(seq.step()), rng::kSample);
  sa.want_probs = true;
  sa.want_sample = !sp.greedy;  // decide takes the argmax
  sa.entropy = d.entropy;
  sa.argmax = d.argmax;
  sa.sample = d.sample;
  sa.argmax_logprob = d.logprob;
  sa.filter = sp.filter;  // off unless the request sets one (and always when greedy)
  if (sp.top_logprobs > 0) {
    if (d.top_ids.empty()) {
      d.top_ids = be.alloc(ScalarType::kI32, {canvas_, sp.top_logprobs});
      d.top_logprobs = be.alloc(ScalarType::kF32, {canvas_, sp.top_logprobs});
    }
    sa.top_n = sp.top_logprobs;
    sa.top_ids = d.top_ids;
    sa.top_logprobs = d.top_logprobs;
  }
  // Traces: the decision margins, requested from the sampler for this step.
  if (sp.trace) {
    sa.argmax_gap = d.argmax_gap = be.alloc(ScalarType::kF32, {canvas_});
    sa.sample_gap = d.sample_gap = be.alloc(ScalarType::kF32, {canvas_});
  }
  if ((sp.trace || sp.previews) && d.accept.empty()) d.accept = be.alloc(ScalarType::kU8, {canvas_});
  sa.guided = guided_gap(seq);
  return sa;
}

GuidedGap DiffusionModelRunner::guided_gap(const Sequence& seq) {
  const GuidedSegment seg = seq.guided_segment();
  GuidedGap g;
  if (seg.empty() || !backend_->supports_guided_gaps()) return g;
  g.tables = &guided_.get(*backend_, seq.params().guided->constraint);
  g.first = seg.first;
  g.last = seg.last;
  g.state = seq.guided_state();
  g.room = seg.room;
  return g;
}

DecideArgs DiffusionModelRunner::decide_args(const Sequence& seq, DeviceState& d, const Tensor& flags) {
  const SequenceParams& sp = seq.params();
  const DiffusionParams& dp = sp.diffusion;
  DecideArgs da;
  da.entropy = d.entropy;
  da.argmax = d.argmax;
  da.sample = d.sample;
  da.greedy = sp.greedy;  // temperature 0
  da.entropy_bound = static_cast<float>(dp.entropy_bound);
  da.confidence_threshold = static_cast<float>(dp.confidence_threshold);
  da.renoise_key = rng::stream_key(sp.seed, static_cast<uint64_t>(seq.canvas_index()),
                                   static_cast<uint64_t>(seq.step()), rng::kRenoise);
  da.vocab = vocab_;
  da.prev_argmax = d.prev_argmax;
  da.have_prev = seq.step() > 0;
  da.canvas = d.canvas;
  da.flags = flags;
  if (sp.trace || sp.previews) da.accept = d.accept;  // the acceptance mask, for traces and previews
  da.guided = guided_gap(seq);
  if (!seq.canvas_pins().empty()) {
    da.pin_mask = d.pin_mask;
    da.pin_tokens = d.pin_tokens;
  }
  return da;
}

}  // namespace dgemma
