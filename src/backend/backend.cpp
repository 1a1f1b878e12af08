// The Backend defaults: weights uploaded as they are, and the residual junctions and the attention
// prologue of a layer composed of the element-wise ops (the CUDA backend fuses each into one launch).
#include "backend/backend.h"

namespace dgemma {

Weight Backend::upload_weight(const Weight& host) {
  Weight w = host;
  w.data = upload(host.data);
  if (!host.block.empty()) w.block = upload(host.block);
  if (!host.row_scale.empty()) w.row_scale = upload(host.row_scale);
  return w;
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
}

void Backend::ffn_residual(const FfnResidualArgs& a) {
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
}

void Backend::qkv_prologue(const QkvPrologueArgs& a) {
  if (a.k_eq_v) copy(a.v, a.k);
  rmsnorm(a.q, &a.q_norm, a.eps, a.q);
  rmsnorm(a.k, &a.k_norm, a.eps, a.k);
  rmsnorm(a.v, nullptr, a.eps, a.v);
  rope(a.q, a.positions, a.inv_freq);
  rope(a.k, a.positions, a.inv_freq);
}

}  // namespace dgemma
