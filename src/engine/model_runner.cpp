#include "engine/model_runner.h"

#include <algorithm>

#include "backend/decide_rules.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {

DiffusionModelRunner::DiffusionModelRunner(DiffusionGemma& model, const KvStorage& kv)
    : model_(model),
      kv_(kv),
      canvas_(model.config().canvas_length),
      vocab_(static_cast<int>(model.config().text.vocab_size)) {}

DiffusionModelRunner::DeviceState DiffusionModelRunner::new_state(bool soft) {
  Backend& be = model_.backend();
  DeviceState d;
  d.canvas = be.alloc(ScalarType::kI32, {canvas_});
  d.prev_argmax = be.alloc(ScalarType::kI32, {canvas_});
  d.entropy = be.alloc(ScalarType::kF32, {canvas_});
  d.sample = be.alloc(ScalarType::kI32, {canvas_});
  d.logprob = be.alloc(ScalarType::kF32, {canvas_});
  if (soft) d.soft = be.alloc(ScalarType::kBF16, {canvas_, model_.config().text.hidden_size});
  return d;
}

DiffusionModelRunner::DeviceState& DiffusionModelRunner::state_of(const Sequence& seq) {
  auto it = state_.find(seq.id());
  if (it != state_.end()) return it->second;
  return state_.emplace(seq.id(), new_state(true)).first->second;
}

DiffusionModelRunner::DeviceState& DiffusionModelRunner::idle_state(int k) {
  while (static_cast<int>(idle_.size()) <= k) {
    DeviceState d = new_state(false);  // no soft buffer: an idle canvas's rows are never scattered
    const std::vector<int32_t> zeros(static_cast<size_t>(canvas_), 0);  // token 0: any valid id does
    model_.backend().from_host(d.canvas, zeros.data());
    idle_.push_back(std::move(d));
  }
  return idle_[static_cast<size_t>(k)];
}

void DiffusionModelRunner::ensure_step_buffers(int64_t canvases) {
  Backend& be = model_.backend();
  const int64_t C = canvas_;
  if (logits_.empty() || logits_.dim(0) < canvases * C) {
    DG_CHECK(graphs_.empty());  // recorded steps read the buffers they were recorded with
    logits_ = Tensor{};  // back to the allocator before the larger one is taken
    logits_ = be.alloc(ScalarType::kBF16, {canvases * C, model_.logits_columns()});
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
  fi.plan_cached = max_context_;
  fi.token_ids = d.canvas;
  fi.logits = logits_.rows(k * C, (k + 1) * C);
  step.items.push_back(fi);
  step.canvases.push_back(&d);
  step.seqs.push_back(nullptr);
  const Tensor row = out_.rows(k, k + 1).reshape({2 + C});
  d.argmax = borrow_tensor(row.ptr<int32_t>() + 2, ScalarType::kI32, {C}, row.device);
  SamplerArgs sa;
  sa.logits = fi.logits;
  sa.softcap = static_cast<float>(model_.config().text.final_logit_softcapping);
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

bool DiffusionModelRunner::graphable(const Step& step) const {
  if (step.canvases.empty() || step.items.size() != step.canvases.size() || step.pinned || step_dump_) return false;
  for (const SamplerArgs& a : step.sampling)
    if (a.filter.active() || a.top_n > 0) return false;
  return true;
}

int64_t DiffusionModelRunner::table_room(int b) const {
  const int64_t pages = (max_context_ + canvas_ - 1) / canvas_ + 1;  // a page per canvas of the context
  return int64_t{b} * kKvGroups * pages;
}

DiffusionModelRunner::BlockLayout DiffusionModelRunner::encode_block(const Step& step, ForwardInputs& in) const {
  const Backend& be = model_.backend();
  const int n = static_cast<int>(step.canvases.size());
  auto aligned = [](int64_t w) { return (w + 15) / 16 * 16; };  // 64 bytes: the encoded structs' alignment
  BlockLayout lay;
  lay.soft_out_at = aligned(static_cast<int64_t>(in.words.size()));
  lay.sampler_at = aligned(lay.soft_out_at + 2 * n);
  lay.decide_at = aligned(lay.sampler_at + static_cast<int64_t>((be.encoded_sampler_bytes(n) + 3) / 4));
  lay.words = aligned(lay.decide_at + static_cast<int64_t>((be.encoded_decide_bytes(n) + 3) / 4));
  in.words.resize(static_cast<size_t>(lay.words), 0);
  for (int i = 0; i < n; ++i)  // an idle canvas's empty soft buffer: address 0, not scattered
    put_address(in.words, lay.soft_out_at + 2 * i, step.canvases[static_cast<size_t>(i)]->soft);
  if (n > 0) {
    be.encode_sampler_args(step.sampling, in.words.data() + lay.sampler_at);
    be.encode_decide_args(step.deciding, in.words.data() + lay.decide_at);
  }
  return lay;
}

void DiffusionModelRunner::execute(Step& step, const ForwardInputs& in, const BlockLayout& lay, const Tensor& block) {
  model_.forward(step.items, kv_, in, block);
  const int64_t N = static_cast<int64_t>(step.canvases.size());
  if (N == 0) return;
  // All canvases at once: one sampler, one self-conditioning GEMM (its rows scattered to each canvas's
  // soft buffer), one decide.
  const int64_t C = canvas_, H = model_.config().text.hidden_size;
  model_.sampler_batch_encoded(step.sampling, block.rows(lay.sampler_at, lay.decide_at));
  Backend& be = model_.backend();
  Tensor soft = be.alloc(ScalarType::kBF16, {N * C, H});
  model_.soft_embeddings(logits_.rows(0, N * C), soft);  // probs . E * embed_scale
  be.scatter_blocks(soft, block.rows(lay.soft_out_at, lay.soft_out_at + 2 * N), N, C * H * 2);
  if (step.pinned)  // pinned positions feed their one-hot token instead of their softmax row
    for (int64_t i = 0; i < N; ++i) {
      DeviceState& d = *step.canvases[static_cast<size_t>(i)];
      if (d.pinned)
        for (const auto& [b, e] : step.seqs[static_cast<size_t>(i)]->canvas_pins().runs)
          model_.one_hot_soft_embeddings(d.pin_tokens.rows(b, e), d.soft.rows(b, e));
    }
  be.decide_batch_encoded(step.deciding, block.rows(lay.decide_at, lay.words));
}

std::vector<int> DiffusionModelRunner::enable_graphs(const std::vector<int>& buckets, int64_t max_context) {
  Backend& be = model_.backend();
  if (!be.supports_graphs() || buckets.empty()) return {};
  DG_CHECK(graphs_.empty() && max_context > 0 && std::is_sorted(buckets.begin(), buckets.end()) && buckets.front() >= 1);
  set_attention_plan_context(max_context);
  const int largest = buckets.back();
  ensure_step_buffers(largest);
  // One idle step of b canvases per bucket, largest first (its memory is what the smaller ones reuse):
  // run once op by op (kernels load, cuBLAS picks its kernels, the caches fill), then recorded.
  std::vector<Graph> made;
  for (auto it = buckets.rbegin(); it != buckets.rend(); ++it) {
    const int b = *it;
    Step step;
    for (int k = 0; k < b; ++k) add_idle_canvas(step, k);
    Graph g;
    g.canvases = b;
    ForwardInputs in = model_.encode_inputs(step.items, table_room(b));
    const BlockLayout lay = encode_block(step, in);
    g.words = lay.words;
    if (graph_block_.empty()) graph_block_ = be.alloc(ScalarType::kI32, {lay.words});  // the largest layout
    DG_CHECK(lay.words <= graph_block_.numel());
    const Tensor block = graph_block_.rows(0, lay.words);
    be.from_host(block, in.words.data());
    execute(step, in, lay, block);
    be.synchronize();
    g.graph = be.capture([&] { execute(step, in, lay, block); });
    if (!g.graph) return {};
    made.push_back(std::move(g));
  }
  std::reverse(made.begin(), made.end());
  graphs_ = std::move(made);
  std::vector<int> sizes;
  for (const Graph& g : graphs_) sizes.push_back(g.canvases);
  return sizes;
}

std::vector<DenoiseFlags> DiffusionModelRunner::run(const StepPlan& plan) {
  Backend& be = model_.backend();
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
      it.tokens = std::span<const int32_t>(s.history()).subspan(static_cast<size_t>(p.begin), static_cast<size_t>(p.end - p.begin));
      it.kv.cached = p.begin;
      step.items.push_back(it);
    } else {
      DeviceState& d = state_of(s);
      if (s.step() == 0) {
        const std::vector<int32_t> canvas = s.initial_canvas();
        be.from_host(d.canvas, canvas.data());
        d.have_soft = false;
        const CanvasPins& pins = s.canvas_pins();
        d.pinned = !pins.empty();
        if (d.pinned) {
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
      it.plan_cached = max_context_ > 0 ? max_context_ : -1;
      it.soft_embeds = d.have_soft ? d.soft : Tensor{};
      it.logits = logits_.rows(i * C, (i + 1) * C);
      it.token_ids = d.canvas;
      denoise_items.push_back(it);
      step.canvases.push_back(&d);
      step.seqs.push_back(&s);
      step.pinned |= d.pinned;
    }
  }
  step.items.insert(step.items.end(), denoise_items.begin(), denoise_items.end());
  if (step.items.empty()) return {};
  if (step_dump_) {
    // The hook gets host copies, whatever the backend.
    DumpHook hook = step_dump_(steps_);
    if (hook)
      model_.set_dump_hook([&be, hook](const std::string& name, const Tensor& t) {
        if (t.device == Device::kCpu) return hook(name, t);
        Tensor h = host_tensor(t.type, {t.numel()});
        be.to_host(t, h.data);
        h.ndim = t.ndim;
        h.shape = t.shape;
        hook(name, h);
      });
    else
      model_.set_dump_hook(nullptr);
  }
  ++steps_;

  // Each canvas's sampler and decide arguments: its row i of out_ receives {flags[2], argmax[C]}.
  const int64_t N = static_cast<int64_t>(step.canvases.size());
  for (int64_t i = 0; i < N; ++i) {
    DeviceState& d = *step.canvases[static_cast<size_t>(i)];
    const Sequence& seq = *step.seqs[static_cast<size_t>(i)];
    const Tensor row = out_.rows(i, i + 1).reshape({2 + C});
    d.argmax = borrow_tensor(row.ptr<int32_t>() + 2, ScalarType::kI32, {C}, row.device);
    d.argmax.owner = out_.owner;
    step.sampling.push_back(sampler_args(seq, d, logits_.rows(i * C, (i + 1) * C)));
    step.deciding.push_back(decide_args(seq, d, borrow_tensor(row.ptr<int32_t>(), ScalarType::kI32, {2}, row.device)));
  }

  // The smallest recorded batch that holds the step, padded with idle canvases.
  const Graph* graph = nullptr;
  if (graphable(step))
    for (const Graph& g : graphs_)
      if (g.canvases >= N) {
        graph = &g;
        break;
      }
  if (graph != nullptr) {
    for (int64_t k = N; k < graph->canvases; ++k) add_idle_canvas(step, static_cast<int>(k));
    ForwardInputs in = model_.encode_inputs(step.items, table_room(graph->canvases));
    const BlockLayout lay = encode_block(step, in);
    DG_CHECK(lay.words == graph->words);  // the layout recorded
    be.from_host(graph_block_.rows(0, lay.words), in.words.data());
    graph->graph->replay();
    ++graph_steps_;
  } else {
    ForwardInputs in = model_.encode_inputs(step.items);
    const BlockLayout lay = encode_block(step, in);
    Tensor block = be.alloc(ScalarType::kI32, {lay.words});
    be.from_host(block, in.words.data());
    execute(step, in, lay, block);
    ++eager_steps_;
  }
  for (int64_t i = 0; i < N; ++i) step.canvases[static_cast<size_t>(i)]->have_soft = true;
  if (N == 0) return {};

  // One read of every canvas's flags and argmax row.
  std::vector<int32_t> values(static_cast<size_t>(N * (2 + C)));
  be.to_host(out_.rows(0, N), values.data());
  std::vector<DenoiseFlags> flags(static_cast<size_t>(N));
  for (size_t i = 0; i < flags.size(); ++i) {
    const int32_t* r = values.data() + i * static_cast<size_t>(2 + C);
    flags[i] = {r[0] != 0, r[1] != 0};
    step.canvases[i]->argmax_host.assign(r + 2, r + 2 + C);
  }
  return flags;
}

SamplerArgs DiffusionModelRunner::sampler_args(const Sequence& seq, DeviceState& d, const Tensor& logits) {
  Backend& be = model_.backend();
  const SequenceParams& sp = seq.params();
  SamplerArgs sa;
  sa.logits = logits;
  sa.softcap = static_cast<float>(model_.config().text.final_logit_softcapping);
  sa.temperature = seq.temperature();
  sa.sample_key = rng::stream_key(sp.seed, static_cast<uint64_t>(seq.canvas_index()), static_cast<uint64_t>(seq.step()), rng::kSample);
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
  if (sp.trace) {
    sa.argmax_gap = d.argmax_gap = be.alloc(ScalarType::kF32, {canvas_});
    sa.sample_gap = d.sample_gap = be.alloc(ScalarType::kF32, {canvas_});
  }
  if ((sp.trace || sp.previews) && d.accept.empty()) d.accept = be.alloc(ScalarType::kU8, {canvas_});
  d.temperature = sa.temperature;
  return sa;
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
  da.renoise_key = rng::stream_key(sp.seed, static_cast<uint64_t>(seq.canvas_index()), static_cast<uint64_t>(seq.step()), rng::kRenoise);
  da.vocab = vocab_;
  da.prev_argmax = d.prev_argmax;
  da.have_prev = seq.step() > 0;
  da.canvas = d.canvas;
  da.flags = flags;
  if (sp.trace || sp.previews) da.accept = d.accept;
  if (d.pinned) {
    da.pin_mask = d.pin_mask;
    da.pin_tokens = d.pin_tokens;
  }
  return da;
}

std::vector<int32_t> DiffusionModelRunner::read_argmax(const Sequence& seq) {
  DeviceState& d = state_of(seq);
  if (d.argmax_host.size() == static_cast<size_t>(canvas_)) return d.argmax_host;  // read with the step's flags
  std::vector<int32_t> v(static_cast<size_t>(canvas_));
  if (!d.argmax.empty()) model_.backend().to_host(d.argmax, v.data());
  return v;
}

std::vector<float> DiffusionModelRunner::read_logprobs(const Sequence& seq) {
  DeviceState& d = state_of(seq);
  std::vector<float> v(static_cast<size_t>(canvas_));
  model_.backend().to_host(d.logprob, v.data());
  return v;
}

TopAlternatives DiffusionModelRunner::read_top_logprobs(const Sequence& seq) {
  DeviceState& d = state_of(seq);
  TopAlternatives t;
  if (d.top_ids.empty()) return t;
  t.n = static_cast<int>(d.top_ids.dim(1));
  t.ids.resize(static_cast<size_t>(d.top_ids.numel()));
  t.logprobs.resize(t.ids.size());
  model_.backend().to_host(d.top_ids, t.ids.data());
  model_.backend().to_host(d.top_logprobs, t.logprobs.data());
  return t;
}

std::vector<float> DiffusionModelRunner::read_entropy(const Sequence& seq) {
  DeviceState& d = state_of(seq);
  std::vector<float> v(static_cast<size_t>(canvas_));
  model_.backend().to_host(d.entropy, v.data());
  return v;
}

std::vector<uint8_t> DiffusionModelRunner::read_accepted(const Sequence& seq) {
  DeviceState& d = state_of(seq);
  if (d.accept.empty()) return {};
  std::vector<uint8_t> v(static_cast<size_t>(canvas_));
  model_.backend().to_host(d.accept, v.data());
  return v;
}

StepRecord DiffusionModelRunner::read_trace(const Sequence& seq, bool stop) {
  DeviceState& d = state_of(seq);
  DG_CHECK(seq.params().trace && !d.accept.empty());
  Backend& be = model_.backend();
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
  r.argmax = i32(d.argmax);
  r.sample = i32(seq.params().greedy ? d.argmax : d.sample);
  r.canvas_out = i32(d.canvas);
  r.entropy = f32(d.entropy);
  r.accept.resize(C);
  be.to_host(d.accept, r.accept.data());
  r.temperature = d.temperature;
  r.stop = stop;
  r.argmax_gap = f32(d.argmax_gap);
  r.sample_gap = f32(d.sample_gap);
  r.accept_margin = entropy_bound_margins(r.entropy, static_cast<float>(seq.params().diffusion.entropy_bound), seq.canvas_pins().mask);
  return r;
}

}  // namespace dgemma
