#include "model/fused_weights.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "model/weights.h"
#include "util/error.h"
#include "util/parallel.h"

namespace dgemma {
namespace {

bool on_host(const Weight& w) { return w.data.device == Device::kCpu; }

// Rows of a 2-D host tensor's bytes appended at `row` of dst (same row width).
void put_rows(Tensor& dst, int64_t row, const Tensor& src) {
  const size_t row_bytes = src.nbytes() / static_cast<size_t>(src.dim(0));
  const size_t n = src.nbytes();
  uint8_t* d = dst.ptr<uint8_t>() + static_cast<size_t>(row) * row_bytes;
  const uint8_t* s = src.ptr<const uint8_t>();
  constexpr size_t kChunk = size_t{1} << 22;  // copies of large weights spread over the cores
  parallel_for((n + kChunk - 1) / kChunk, [&](size_t b, size_t e) {
    for (size_t c = b; c < e; ++c) std::memcpy(d + c * kChunk, s + c * kChunk, std::min(kChunk, n - c * kChunk));
  });
}

Tensor like_rows(const Tensor& t, int64_t rows) {
  return t.ndim == 1 ? host_tensor(t.type, {rows}) : host_tensor(t.type, {rows, t.dim(1)});
}

}  // namespace

FusedPart fused_part(const WeightSpec& spec) {
  const std::string& n = spec.name;
  if (spec.layer < 0) {
    if (n == "self_conditioning.gate_proj.weight") return {FusedGroup::kScGateUp, 0};
    if (n == "self_conditioning.up_proj.weight") return {FusedGroup::kScGateUp, 1};
    return {};
  }
  if (n.ends_with(".self_attn.q_proj.weight")) return {FusedGroup::kQkv, 0};
  if (n.ends_with(".self_attn.k_proj.weight")) return {FusedGroup::kQkv, 1};
  if (n.ends_with(".self_attn.v_proj.weight")) return {FusedGroup::kQkv, 2};
  if (n.ends_with(".mlp.gate_proj.weight")) return {FusedGroup::kGateUp, 0};
  if (n.ends_with(".mlp.up_proj.weight")) return {FusedGroup::kGateUp, 1};
  return {};
}

Weight weight_rows(const Weight& w, int64_t begin, int64_t end) {
  DG_CHECK(begin >= 0 && begin <= end && end <= w.rows());
  Weight out = w;
  out.data = w.data.rows(begin, end);
  if (!w.block.empty()) out.block = w.block.rows(begin, end);
  if (!w.row_scale.empty()) out.row_scale = w.row_scale.rows(begin, end);
  return out;
}

std::optional<Weight> concat_rows(std::span<const Weight> parts) {
  if (parts.empty()) return std::nullopt;
  const Weight& p0 = parts[0];
  int64_t rows = 0;
  for (const Weight& p : parts) {
    if (p.empty() || p.data.ndim != 2 || !on_host(p) || p.format != p0.format || p.act != p0.act || p.cols() != p0.cols() ||
        p.data.type != p0.data.type || p.block.empty() != p0.block.empty() || p.row_scale.empty() != p0.row_scale.empty())
      return std::nullopt;
    rows += p.rows();
  }
  Weight out;
  out.format = p0.format;
  out.act = p0.act;
  out.data = like_rows(p0.data, rows);
  if (!p0.block.empty()) out.block = like_rows(p0.block, rows);
  if (!p0.row_scale.empty()) out.row_scale = like_rows(p0.row_scale, rows);
  int64_t row = 0;
  for (const Weight& p : parts) {
    put_rows(out.data, row, p.data);
    if (!p.block.empty()) put_rows(out.block, row, p.block);
    if (!p.row_scale.empty()) put_rows(out.row_scale, row, p.row_scale);
    row += p.rows();
  }
  return out;
}

void finish_fused(Backend& backend, Weight& fused, std::span<Weight* const> parts, bool fuse) {
  std::vector<Weight*> present;
  for (Weight* p : parts)
    if (!p->empty()) present.push_back(p);
  if (!fused.empty()) {  // built in place (dummy weights): the parts are views into it
    for (Weight* p : present) *p = Weight();
    return;
  }
  std::vector<Weight> host;
  for (Weight* p : present) host.push_back(*p);
  std::optional<Weight> joined = fuse ? concat_rows(host) : std::nullopt;
  if (joined) {
    fused = backend.upload_weight(*joined);
    for (Weight* p : present) *p = Weight();
    return;
  }
  for (Weight* p : present)
    if (on_host(*p)) *p = backend.upload_weight(*p);
}

void finish_layer_fusion(Backend& backend, LayerWeights& L, bool fuse) {
  Weight* qkv[] = {&L.q_proj, &L.k_proj, &L.v_proj};
  finish_fused(backend, L.qkv_proj, qkv, fuse);
  Weight* gate_up[] = {&L.mlp_gate, &L.mlp_up};
  finish_fused(backend, L.mlp_gate_up, gate_up, fuse);
}

void finish_sc_fusion(Backend& backend, ModelWeights& w, bool fuse) {
  Weight gate(w.sc_gate), up(w.sc_up), fused(w.sc_gate_up);
  Weight* parts[] = {&gate, &up};
  finish_fused(backend, fused, parts, fuse);
  w.sc_gate = gate.data;
  w.sc_up = up.data;
  w.sc_gate_up = fused.data;
}

}  // namespace dgemma
