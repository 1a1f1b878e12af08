// The Backend defaults: weights uploaded as they are, the residual junctions and the attention
// prologue of a layer composed of the element-wise ops (the CUDA backend fuses each into one launch), and
// the vision tower's own ops as the CPU reference run through the host.
#include "backend/backend.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/quant_reference.h"
#include "util/bf16.h"
#include "util/error.h"

namespace dgemma {

Weight Backend::upload_weight(const Weight& host) {
  Weight w = host;
  w.data = upload(host.data);
  if (!host.block.empty()) w.block = upload(host.block);
  if (!host.row_scale.empty()) w.row_scale = upload(host.row_scale);
  return w;
}

bool takes_fp8_rows(const Weight& w) {
  return w.format == WeightFormat::kFp8Channel && w.act == ActQuant::kFp8Token &&
         w.cols() % kFp8RowsAlign == 0;
}

void check_fp8_rows(const Fp8Rows& rows, int64_t T, int64_t K, Device device, const char* op) {
  const Tensor &q = rows.codes, &s = rows.scales;
  if (q.type != ScalarType::kU8 || s.type != ScalarType::kF32 || q.ndim < 1 || q.dim(0) != T ||
      q.numel() != T * K || s.numel() != T || q.device != device || s.device != device)
    fail(ErrorKind::kInternal,
         "{}: FP8 rows must be u8 codes [{}, {}] and f32 scales [{}] on the op's device", op, T, K, T);
}

void check_fp8_input(const Fp8Rows& rows, const Weight& w, int64_t T, Device device, const char* op) {
  if (!takes_fp8_rows(w))
    fail(ErrorKind::kInternal, "{}: FP8 rows given for a weight that does not run W8A8 ({})", op,
         w.describe());
  check_fp8_rows(rows, T, w.cols(), device, op);
}

void Backend::quantize_fp8_rows(const Tensor& x, const Fp8Rows& out) {
  const int64_t T = x.ndim > 0 ? x.dim(0) : 0, K = T > 0 ? x.numel() / T : 0;
  DG_CHECK(x.type == ScalarType::kBF16);
  check_fp8_rows(out, T, K, device(), "quantize_fp8_rows");
  if (T == 0 || K == 0) return;
  std::vector<uint16_t> xb(static_cast<size_t>(T * K));
  to_host(x, xb.data());
  std::vector<float> xf(xb.size()), scales(static_cast<size_t>(T));
  for (size_t i = 0; i < xb.size(); ++i) xf[i] = bf16_to_f32(xb[i]);
  std::vector<uint8_t> codes(xb.size());
  quant_ref::quantize_fp8_codes(xf.data(), T, K, codes.data(), scales.data());
  from_host(out.codes, codes.data());
  from_host(out.scales, scales.data());
}

void Backend::attn_residual(const AttnResidualArgs& a) {
  const int64_t T = a.x.dim(0), H = a.x.dim(-1);
  Tensor on = a.o_normed.empty() ? alloc(ScalarType::kBF16, {T, H}) : a.o_normed;
  rmsnorm(a.o, &a.post_norm, a.eps, on);
  add(a.x, on, a.h1);
  rmsnorm(a.h1, &a.norm_a, a.eps, a.out_a);
  rmsnorm(a.h1, &a.norm_b, a.eps, a.out_b);
  if (!a.router_out.empty()) {
    rmsnorm(a.h1, nullptr, a.eps, a.router_out);
    mul(a.router_out, a.router_scale, a.router_out);
    scale(a.router_out, a.router_root, a.router_out);
  }
  if (!a.out_a_fp8.empty()) quantize_fp8_rows(a.out_a, a.out_a_fp8);
  if (!a.out_b_fp8.empty()) quantize_fp8_rows(a.out_b, a.out_b_fp8);
}

void Backend::ffn_residual(const FfnResidualArgs& a) {
  if (!a.m2_slots.empty())
    fail(ErrorKind::kInternal, "{}: the composed FFN junction takes the MoE's summed rows, not its slots", name());
  const int64_t T = a.h1.dim(0), H = a.h1.dim(-1);
  auto tmp = [&](const Tensor& given) { return given.empty() ? alloc(ScalarType::kBF16, {T, H}) : given; };
  Tensor m1n = tmp(a.m1n), m2n = tmp(a.m2n), f = tmp(a.f);
  rmsnorm(a.m1, &a.norm1, a.eps, m1n);
  rmsnorm(a.m2, &a.norm2, a.eps, m2n);
  add(m1n, m2n, f);
  rmsnorm(f, &a.norm_f, a.eps, f);
  add(a.h1, f, a.out);
  scale(a.out, a.scale, a.out);
  if (!a.next_out.empty()) rmsnorm(a.out, &a.next_norm, a.eps, a.next_out);
  if (!a.next_out_fp8.empty()) {
    DG_CHECK(!a.next_out.empty());
    quantize_fp8_rows(a.next_out, a.next_out_fp8);
  }
}

void check_image_blocks(std::span<const ImageBlock> blocks, int64_t n) {
  for (size_t b = 0; b < blocks.size(); ++b)
    DG_CHECK(blocks[b].first >= 0 && blocks[b].first < blocks[b].end && blocks[b].end <= n &&
             (b == 0 || blocks[b - 1].end <= blocks[b].first));
}

std::span<const ImageBlock> item_image_blocks(const AttentionItem& it, std::span<const ImageBlock> blocks) {
  if (it.blocks_len == 0) return {};
  DG_CHECK(it.blocks_len > 0 && it.blocks_first >= 0 &&
           it.blocks_first + int64_t{it.blocks_len} <= static_cast<int64_t>(blocks.size()) &&
           (it.blocks_windowed == 0 || it.blocks_windowed == 1));
  const auto mine = blocks.subspan(static_cast<size_t>(it.blocks_first), static_cast<size_t>(it.blocks_len));
  check_image_blocks(mine, it.q_len);
  return mine;
}

// One attention() per item, each on its rows and its slice of the page tables.
void Backend::attention_batch(const AttentionBatchArgs& a) {
  DG_CHECK(a.items.empty() || a.items.numel() == static_cast<int64_t>(a.host_items.size()) * kAttentionItemFields);
  const int64_t T = a.q.dim(0);
  for (const AttentionItem& it : a.host_items) {
    DG_CHECK(it.q_first >= 0 && it.q_len >= 0 && it.q_first + int64_t{it.q_len} <= T);
    DG_CHECK(it.table_first >= 0 && it.table_len >= 0 &&
             (it.table_len == 0 || it.table_first + int64_t{it.table_len} <= a.page_tables.numel()));
    if (it.q_len == 0) continue;
    AttentionArgs one;
    one.q = a.q.rows(it.q_first, it.q_first + it.q_len);
    one.k_new = a.k_new.rows(it.q_first, it.q_first + it.q_len);
    one.v_new = a.v_new.rows(it.q_first, it.q_first + it.q_len);
    one.out = a.out.rows(it.q_first, it.q_first + it.q_len);
    one.cache_first = it.cache_first;
    one.cache_len = it.cache_len;
    if (it.cache_len > 0) {
      DG_CHECK(it.table_len > 0);
      one.k_pages = a.k_pages;
      one.v_pages = a.v_pages;
      one.page_table = a.page_tables.rows(it.table_first, it.table_first + it.table_len);
    }
    one.causal = it.causal != 0;
    one.window = it.window;
    one.blocks = item_image_blocks(it, a.host_blocks);
    if (!one.blocks.empty()) {
      if (!a.blocks.empty()) {
        DG_CHECK(a.blocks.numel() == 2 * static_cast<int64_t>(a.host_blocks.size()));
        one.blocks_device = a.blocks.reshape({a.blocks.numel()})
                                .rows(2 * it.blocks_first, 2 * (it.blocks_first + it.blocks_len));
      }
      one.blocks_windowed = it.blocks_windowed != 0;
    }
    one.scaling = a.scaling;
    attention(one);
  }
}

void Backend::sampler_batch(std::span<const SamplerArgs> canvases) {
  for (const SamplerArgs& a : canvases) sampler(a);
}

void Backend::decide_batch(std::span<const DecideArgs> canvases) {
  for (const DecideArgs& a : canvases) decide(a);
}

void Backend::sampler_batch_encoded(std::span<const SamplerArgs> canvases, const Tensor& /*encoded*/) {
  sampler_batch(canvases);
}

void Backend::decide_batch_encoded(std::span<const DecideArgs> canvases, const Tensor& /*encoded*/) {
  decide_batch(canvases);
}

// The defaults read the table back and copy block by block (the CPU backend: host addresses).
void Backend::gather_blocks(const Tensor& table, int64_t n, int64_t block_bytes, const Tensor& dst, bool zero_missing) {
  DG_CHECK(n >= 0 && block_bytes >= 0 && table.nbytes() >= static_cast<size_t>(n) * 8 &&
           dst.nbytes() >= static_cast<size_t>(n * block_bytes));
  if (n == 0 || block_bytes == 0) return;
  std::vector<uint64_t> at(static_cast<size_t>(n));
  to_host(borrow_tensor(table.data, ScalarType::kU8, {n * 8}, table.device), at.data());
  std::vector<uint8_t> zeros;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor block = borrow_tensor(dst.ptr<uint8_t>() + i * block_bytes, ScalarType::kU8, {block_bytes}, dst.device);
    if (at[static_cast<size_t>(i)] != 0) {
      copy(block, borrow_tensor(reinterpret_cast<void*>(static_cast<uintptr_t>(at[static_cast<size_t>(i)])),
                                ScalarType::kU8, {block_bytes}, dst.device));
    } else if (zero_missing) {
      zeros.resize(static_cast<size_t>(block_bytes));
      from_host(block, zeros.data());
    }
  }
}

void Backend::scatter_blocks(const Tensor& src, const Tensor& table, int64_t n, int64_t block_bytes) {
  DG_CHECK(n >= 0 && block_bytes >= 0 && table.nbytes() >= static_cast<size_t>(n) * 8 &&
           src.nbytes() >= static_cast<size_t>(n * block_bytes));
  if (n == 0 || block_bytes == 0) return;
  std::vector<uint64_t> at(static_cast<size_t>(n));
  to_host(borrow_tensor(table.data, ScalarType::kU8, {n * 8}, table.device), at.data());
  for (int64_t i = 0; i < n; ++i)
    if (at[static_cast<size_t>(i)] != 0)
      copy(borrow_tensor(reinterpret_cast<void*>(static_cast<uintptr_t>(at[static_cast<size_t>(i)])), ScalarType::kU8,
                         {block_bytes}, src.device),
           borrow_tensor(src.ptr<uint8_t>() + i * block_bytes, ScalarType::kU8, {block_bytes}, src.device));
}

void Backend::copy_columns(const Tensor& dst, const Tensor& src, int64_t first) {
  const int64_t T = dst.dim(0), n = T > 0 ? dst.numel() / T : 0, m = T > 0 ? src.numel() / T : 0;
  DG_CHECK(dst.type == src.type && src.dim(0) == T && first >= 0 && first + n <= m);
  if (T == 0 || n == 0) return;
  const size_t es = scalar_size(src.type);
  std::vector<uint8_t> s(src.nbytes()), d(dst.nbytes());
  to_host(src, s.data());
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(d.data() + static_cast<size_t>(t * n) * es, s.data() + static_cast<size_t>(t * m + first) * es,
                static_cast<size_t>(n) * es);
  from_host(dst, d.data());
}

void Backend::gelu_mul_halves(const Tensor& gate_up, const Tensor& out, const Fp8Rows& out_fp8) {
  const int64_t T = gate_up.dim(0), I = out.dim(-1);
  DG_CHECK(gate_up.numel() == 2 * out.numel() && out.dim(0) == T);
  Tensor g = alloc(ScalarType::kBF16, {T, I}), u = alloc(ScalarType::kBF16, {T, I});
  copy_columns(g, gate_up, 0);
  copy_columns(u, gate_up, I);
  gelu_mul(g, u, out);
  if (!out_fp8.empty()) quantize_fp8_rows(out, out_fp8);
}

void Backend::qkv_prologue(const QkvPrologueArgs& a) {
  if (!a.qkv.empty()) {  // the fused projection's column blocks into q / k / v, then the same ops
    const int64_t nq = a.q.numel() / std::max<int64_t>(a.q.dim(0), 1), nk = a.k.numel() / std::max<int64_t>(a.k.dim(0), 1);
    DG_CHECK(a.qkv.numel() == a.q.dim(0) * (nq + (a.k_eq_v ? 1 : 2) * nk));
    copy_columns(a.q, a.qkv, 0);
    copy_columns(a.k, a.qkv, nq);
    if (!a.k_eq_v) copy_columns(a.v, a.qkv, nq + nk);
  }
  if (a.k_eq_v) copy(a.v, a.k);
  rmsnorm(a.q, &a.q_norm, a.eps, a.q);
  rmsnorm(a.k, &a.k_norm, a.eps, a.k);
  rmsnorm(a.v, nullptr, a.eps, a.v);
  rope(a.q, a.positions, a.inv_freq);
  rope(a.k, a.positions, a.inv_freq);
}

namespace {

// A host copy of a device tensor (the tensor itself on the CPU).
Tensor host_copy(Backend& be, const Tensor& t) {
  if (t.empty() || t.device == Device::kCpu) return t;
  Tensor h = host_tensor(t.type, {t.numel()});
  h.ndim = t.ndim;
  h.shape = t.shape;
  be.to_host(t, h.data);
  return h;
}

}  // namespace

void Backend::rope_2d(const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
  const Tensor hx = host_copy(*this, x);
  cpu::rope_2d(hx, host_copy(*this, positions), host_copy(*this, inv_freq));
  if (hx.data != x.data) from_host(x, hx.data);
}

void Backend::vision_pool(const VisionPoolArgs& a) {
  VisionPoolArgs h = a;
  h.x = host_copy(*this, a.x);
  h.std_bias = host_copy(*this, a.std_bias);
  h.std_scale = host_copy(*this, a.std_scale);
  h.out = host_copy(*this, a.out);
  cpu::vision_pool(h);
  if (h.out.data != a.out.data) from_host(a.out, h.out.data);
}

}  // namespace dgemma
