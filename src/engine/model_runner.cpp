#include "engine/model_runner.h"

#include "backend/decide_rules.h"
#include "util/counter_rng.h"
#include "util/error.h"

namespace dgemma {

DiffusionModelRunner::DiffusionModelRunner(DiffusionGemma& model, const KvStorage& kv)
    : model_(model),
      kv_(kv),
      canvas_(model.config().canvas_length),
      vocab_(static_cast<int>(model.config().text.vocab_size)) {}

DiffusionModelRunner::DeviceState& DiffusionModelRunner::state_of(const Sequence& seq) {
  auto it = state_.find(seq.id());
  if (it != state_.end()) return it->second;
  Backend& be = model_.backend();
  DeviceState d;
  d.canvas = be.alloc(ScalarType::kI32, {canvas_});
  d.prev_argmax = be.alloc(ScalarType::kI32, {canvas_});
  d.entropy = be.alloc(ScalarType::kF32, {canvas_});
  d.sample = be.alloc(ScalarType::kI32, {canvas_});
  d.logprob = be.alloc(ScalarType::kF32, {canvas_});
  return state_.emplace(seq.id(), std::move(d)).first->second;
}

std::vector<DenoiseFlags> DiffusionModelRunner::run(const StepPlan& plan) {
  Backend& be = model_.backend();
  int64_t n_denoise = 0;
  for (const PlannedItem& p : plan.items) n_denoise += p.kind == PlannedItem::Kind::kDenoise ? 1 : 0;
  // The step's logits: one buffer, canvas i in rows [i C, (i + 1) C) (a rank: its vocabulary slice).
  const int64_t C = canvas_;
  if (n_denoise > 0 && (logits_.empty() || logits_.dim(0) < n_denoise * C)) {
    logits_ = Tensor{};  // back to the allocator before the larger one is taken
    logits_ = be.alloc(ScalarType::kBF16, {n_denoise * C, model_.logits_columns()});
  }
  // Encode items first, then the denoising canvases (each list in plan order): a sequence's encode
  // item precedes its denoise item either way, and the canvases' logits rows are then adjacent, so
  // the forward gives them one LM-head GEMM.
  std::vector<ForwardItem> items;
  std::vector<ForwardItem> denoise_items;
  std::vector<std::pair<const Sequence*, DeviceState*>> denoising;
  items.reserve(plan.items.size());
  for (const PlannedItem& p : plan.items) {
    const Sequence& s = *p.seq;
    ForwardItem it;
    for (int g = 0; g < kKvGroups; ++g) it.kv.tables[g] = s.blocks.tables[g];
    if (p.kind == PlannedItem::Kind::kEncode) {
      it.kind = ForwardItem::Kind::kEncode;
      it.tokens = std::span<const int32_t>(s.history()).subspan(static_cast<size_t>(p.begin), static_cast<size_t>(p.end - p.begin));
      it.kv.cached = p.begin;
      items.push_back(it);
    } else {
      DeviceState& d = state_of(s);
      if (s.step() == 0) {
        const std::vector<int32_t> canvas = s.initial_canvas();
        be.from_host(d.canvas, canvas.data());
        d.have_soft = false;
        d.soft = Tensor{};  // lets go of the last step's buffer (rows of a step's buffer, shared)
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
      const int64_t i = static_cast<int64_t>(denoising.size());
      it.kind = ForwardItem::Kind::kDenoise;
      it.kv.cached = static_cast<int64_t>(s.history().size());
      it.soft_embeds = d.have_soft ? d.soft : Tensor{};
      it.logits = logits_.rows(i * C, (i + 1) * C);
      it.token_ids = d.canvas;
      denoise_items.push_back(it);
      denoising.push_back({&s, &d});
    }
  }
  items.insert(items.end(), denoise_items.begin(), denoise_items.end());
  if (items.empty()) return {};
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
  model_.forward(items, kv_);
  if (denoising.empty()) return {};

  // All canvases at once: one sampler, one self-conditioning GEMM, one decide, then one read of
  // every canvas's flags and argmax row. out: canvas i's {flags[2], argmax[C]} at row i.
  const int64_t N = static_cast<int64_t>(denoising.size()), H = model_.config().text.hidden_size;
  Tensor out = be.alloc(ScalarType::kI32, {N, 2 + C});
  Tensor soft = be.alloc(ScalarType::kBF16, {N * C, H});  // the next step's inputs (each canvas keeps its rows)
  std::vector<SamplerArgs> sampling;
  std::vector<DecideArgs> deciding;
  for (int64_t i = 0; i < N; ++i) {
    DeviceState& d = *denoising[static_cast<size_t>(i)].second;
    const Tensor row = out.rows(i, i + 1).reshape({2 + C});
    d.argmax = borrow_tensor(row.ptr<int32_t>() + 2, ScalarType::kI32, {C}, row.device);
    d.argmax.owner = out.owner;
    sampling.push_back(sampler_args(*denoising[static_cast<size_t>(i)].first, d, logits_.rows(i * C, (i + 1) * C)));
  }
  model_.sampler_batch(sampling);  // vocabulary-sharded under tensor parallelism
  // Self-conditioning signal for the next step: probs . E * embed_scale.
  const Tensor probs = logits_.rows(0, N * C);
  model_.soft_embeddings(probs, soft);
  for (int64_t i = 0; i < N; ++i) {
    const Sequence& seq = *denoising[static_cast<size_t>(i)].first;
    DeviceState& d = *denoising[static_cast<size_t>(i)].second;
    d.soft = soft.rows(i * C, (i + 1) * C);
    // Pinned positions feed their one-hot token instead of their softmax row.
    if (d.pinned)
      for (const auto& [b, e] : seq.canvas_pins().runs)
        model_.one_hot_soft_embeddings(d.pin_tokens.rows(b, e), d.soft.rows(b, e));
    d.have_soft = true;
    const Tensor row = out.rows(i, i + 1).reshape({2 + C});
    deciding.push_back(decide_args(seq, d, borrow_tensor(row.ptr<int32_t>(), ScalarType::kI32, {2}, row.device)));
  }
  be.decide_batch(deciding);
  std::vector<int32_t> values(static_cast<size_t>(out.numel()));
  be.to_host(out, values.data());
  std::vector<DenoiseFlags> flags(denoising.size());
  for (size_t i = 0; i < denoising.size(); ++i) {
    const int32_t* r = values.data() + i * static_cast<size_t>(2 + C);
    flags[i] = {r[0] != 0, r[1] != 0};
    denoising[i].second->argmax_host.assign(r + 2, r + 2 + C);
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
