// The sampler and decide ops of the CUDA backend: each canvas's arguments validated into the launch
// records the kernels read (sampler/batch.h, sampler/decide.cuh), grouped by launch.
#include "backend/cuda/sampler/ops.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "backend/decide_rules.h"
#include "util/error.h"

namespace dgemma::cuda {
namespace {

// One canvas's sampler arguments, validated, as the kernels take them.
SamplerLaunch sampler_launch(const SamplerArgs& a) {
  const char* op = "sampler";
  need_type(a.logits, ScalarType::kBF16, op, "logits");
  DG_CHECK(a.logits.ndim == 2);
  const int64_t C = a.logits.dim(0), V = a.logits.dim(1);
  DG_CHECK(V > 0 && V < INT_MAX);
  need_type(a.entropy, ScalarType::kF32, op, "entropy");
  need_type(a.argmax, ScalarType::kI32, op, "argmax");
  need_type(a.sample, ScalarType::kI32, op, "sample");
  DG_CHECK(a.entropy.numel() == C && a.argmax.numel() == C && a.sample.numel() == C);
  SamplerLaunch s;
  s.logits = a.logits.ptr<uint16_t>();
  s.C = C;
  s.V = V;
  s.softcap = a.softcap;
  s.temperature = a.temperature;
  s.sample_key = a.sample_key;
  s.want_probs = a.want_probs;
  s.want_sample = a.want_sample;
  s.entropy = a.entropy.ptr<float>();
  s.argmax = a.argmax.ptr<int32_t>();
  s.sample = a.sample.ptr<int32_t>();
  auto optional = [&](const Tensor& t, const char* what) -> float* {
    if (t.empty()) return nullptr;
    need_type(t, ScalarType::kF32, op, what);
    DG_CHECK(t.numel() == C);
    return t.ptr<float>();
  };
  s.argmax_logprob = optional(a.argmax_logprob, "argmax_logprob");
  s.argmax_gap = optional(a.argmax_gap, "argmax_gap");
  s.sample_gap = optional(a.sample_gap, "sample_gap");
  s.sample_floor = optional(a.sample_floor, "sample_floor");
  s.filter = a.filter;
  if (a.top_n > 0) {
    DG_CHECK(a.top_n <= kMaxTopN && a.top_n <= V);
    need_type(a.top_ids, ScalarType::kI32, op, "top_ids");
    need_type(a.top_logprobs, ScalarType::kF32, op, "top_logprobs");
    DG_CHECK(a.top_ids.numel() == C * a.top_n && a.top_logprobs.numel() == C * a.top_n);
    s.top_n = a.top_n;
    s.top_ids = a.top_ids.ptr<int32_t>();
    s.top_logprobs = a.top_logprobs.ptr<float>();
  }
  if (a.guided.active()) {
    const GuidedGap& g = a.guided;
    const GuidedTables& t = *g.tables;
    need_type(t.gap_mask, ScalarType::kI32, op, "the guided gap mask");
    DG_CHECK(t.vocab_size >= 0 && t.gap_mask.numel() == (static_cast<int64_t>(t.vocab_size) + 31) / 32);
    DG_CHECK(g.first >= 0 && g.last <= C);
    s.gap_mask = reinterpret_cast<const uint32_t*>(t.gap_mask.data);
    s.gap_first = g.first;
    s.gap_last = g.last;
    s.gap_limit = t.vocab_size;
  }
  return s;
}

// The launch groups of a step's canvases (kMaxSamplerBatch each), validated, as the kernels read them.
std::vector<SamplerBatch> sampler_batches(std::span<const SamplerArgs> canvases) {
  std::vector<SamplerLaunch> all;
  all.reserve(canvases.size());
  for (const SamplerArgs& a : canvases) {
    all.push_back(sampler_launch(a));
    if (all.back().V != all.front().V)
      fail(ErrorKind::kInternal, "sampler_batch: canvases of {} and {} columns", all.front().V, all.back().V);
  }
  std::vector<SamplerBatch> groups;
  for (size_t i = 0; i < all.size(); i += kMaxSamplerBatch)
    groups.push_back(make_sampler_batch(
        all.data() + i, static_cast<int>(std::min<size_t>(kMaxSamplerBatch, all.size() - i))));
  return groups;
}

// One canvas's decide arguments, validated, as the kernel takes them.
DecideLaunch decide_launch(const DecideArgs& a) {
  DecideLaunch d;
  d.C = check_decide_args(a, Device::kCuda);
  d.entropy = a.entropy.ptr<float>();
  d.argmax = a.argmax.ptr<int32_t>();
  d.sample = a.greedy ? nullptr : a.sample.ptr<int32_t>();
  d.entropy_bound = a.entropy_bound;
  d.confidence_threshold = a.confidence_threshold;
  d.renoise_key = a.renoise_key;
  d.vocab = static_cast<uint32_t>(a.vocab);
  d.prev_argmax = a.prev_argmax.ptr<int32_t>();
  d.have_prev = a.have_prev;
  d.canvas = a.canvas.ptr<int32_t>();
  d.flags = a.flags.ptr<int32_t>();
  d.accept = a.accept.empty() ? nullptr : a.accept.ptr<uint8_t>();
  if (!a.pin_mask.empty()) {
    d.pin_mask = a.pin_mask.ptr<uint8_t>();
    d.pin_tokens = a.pin_tokens.ptr<int32_t>();
  }
  if (a.guided.active()) {  // check_decide_args checked its range and state
    const GuidedTables& t = *a.guided.tables;
    const char* op = "decide";
    need_type(t.byte_class, ScalarType::kU8, op, "the guided byte classes");
    need_type(t.next, ScalarType::kI32, op, "the guided transitions");
    need_type(t.accepting, ScalarType::kU8, op, "the guided accepting states");
    need_type(t.distance, ScalarType::kI32, op, "the guided completion lengths");
    need_type(t.token_offsets, ScalarType::kI32, op, "the guided token offsets");
    need_type(t.token_bytes, ScalarType::kU8, op, "the guided token bytes");
    need_type(t.token_kind, ScalarType::kU8, op, "the guided token kinds");
    DG_CHECK(t.byte_class.numel() == 256 && t.distance.numel() == t.num_states &&
             t.next.numel() == static_cast<int64_t>(t.num_states) * t.num_classes &&
             t.token_offsets.numel() == static_cast<int64_t>(t.vocab_size) + 1 &&
             t.token_kind.numel() == t.vocab_size);
    d.gap.view = guided_view(t);
    d.gap.distance = t.distance.ptr<int32_t>();
    d.gap.first = a.guided.first;
    d.gap.last = a.guided.last;
    d.gap.state = a.guided.state;
    d.gap.room = a.guided.room;
  }
  return d;
}

// The launch groups (kMaxDecideBatch canvases each), validated, as the kernel reads them.
std::vector<DecideBatch> decide_batches(std::span<const DecideArgs> canvases) {
  std::vector<DecideLaunch> all;
  all.reserve(canvases.size());
  for (const DecideArgs& a : canvases) all.push_back(decide_launch(a));
  std::vector<DecideBatch> groups;
  for (size_t i = 0; i < all.size(); i += kMaxDecideBatch)
    groups.push_back(make_decide_batch(all.data() + i,
                                       static_cast<int>(std::min<size_t>(kMaxDecideBatch, all.size() - i))));
  return groups;
}

}  // namespace

size_t encoded_sampler_bytes(int canvases) {
  return static_cast<size_t>((canvases + kMaxSamplerBatch - 1) / kMaxSamplerBatch) * sizeof(SamplerBatch);
}

void encode_sampler_args(std::span<const SamplerArgs> canvases, void* host) {
  const std::vector<SamplerBatch> groups = sampler_batches(canvases);
  std::memcpy(host, groups.data(), groups.size() * sizeof(SamplerBatch));
}

// One launch per pass for each group; the kernels read group g at encoded + g (device memory), or, without
// `encoded`, from a copy sent up through the staging ring ahead of the launches.
void sampler_batch(const Context& ctx, std::span<const SamplerArgs> canvases, const SamplerBatch* encoded) {
  const std::vector<SamplerBatch> groups = sampler_batches(canvases);
  for (size_t g = 0; g < groups.size(); ++g) {
    const size_t ws_bytes = sampler_workspace_bytes(groups[g]);
    const size_t args_at = (ws_bytes + 255) / 256 * 256;
    Tensor workspace =
        ctx.alloc(ScalarType::kU8, {static_cast<int64_t>(args_at + (encoded ? 0 : sizeof(SamplerBatch)))});
    const SamplerBatch* dev = encoded + g;
    if (encoded == nullptr) {
      dev = reinterpret_cast<const SamplerBatch*>(workspace.ptr<uint8_t>() + args_at);
      ctx.upload_small(const_cast<SamplerBatch*>(dev), &groups[g], sizeof(SamplerBatch));
    }
    launch_sampler(groups[g], dev, workspace.data, ctx.stream);
  }
}

size_t encoded_decide_bytes(int canvases) {
  return static_cast<size_t>((canvases + kMaxDecideBatch - 1) / kMaxDecideBatch) * sizeof(DecideBatch);
}

void encode_decide_args(std::span<const DecideArgs> canvases, void* host) {
  const std::vector<DecideBatch> groups = decide_batches(canvases);
  std::memcpy(host, groups.data(), groups.size() * sizeof(DecideBatch));
}

// The kernel reads group g at encoded + g, or, with encoded null, from a copy sent up first.
void decide_batch(const Context& ctx, std::span<const DecideArgs> canvases, const DecideBatch* encoded) {
  const std::vector<DecideBatch> groups = decide_batches(canvases);
  for (size_t g = 0; g < groups.size(); ++g) {
    if (encoded != nullptr) {
      launch_decide(groups[g], encoded + g, ctx.stream);
      continue;
    }
    Tensor copy = ctx.alloc(ScalarType::kU8, {static_cast<int64_t>(sizeof(DecideBatch))});
    ctx.upload_small(copy.data, &groups[g], sizeof(DecideBatch));
    launch_decide(groups[g], reinterpret_cast<const DecideBatch*>(copy.data), ctx.stream);
  }
}

}  // namespace dgemma::cuda
