#include "model/weight_upload.h"

namespace dgemma {
namespace {

Tensor up(const Tensor& t, Backend& be) {
  return t.empty() ? Tensor{} : be.upload(t);
}
Weight up(const Weight& w, Backend& be) {
  return w.empty() ? Weight{} : be.upload_weight(w);
}

}  // namespace

ModelWeights upload_model_weights(const ModelWeights& host, Backend& be) {
  ModelWeights w;
  w.checkpoint = host.checkpoint;
  w.embed = up(host.embed, be);
  w.final_norm = up(host.final_norm, be);
  w.sc_pre_norm = up(host.sc_pre_norm, be);
  w.sc_down = up(host.sc_down, be);
  w.sc_gate_up = up(host.sc_gate_up, be);
  w.sc_gate = up(host.sc_gate, be);
  w.sc_up = up(host.sc_up, be);
  for (const LayerWeights& h : host.layers) {
    LayerWeights l;
    l.spec = h.spec;
    l.layer_scalar_decoder = h.layer_scalar_decoder;
    l.layer_scalar_encoder = h.layer_scalar_encoder;
    for (auto [dst, src] : {std::pair{&l.input_norm, &h.input_norm},
                            {&l.post_attn_norm, &h.post_attn_norm},
                            {&l.q_norm, &h.q_norm},
                            {&l.k_norm, &h.k_norm},
                            {&l.pre_ff_norm, &h.pre_ff_norm},
                            {&l.post_ff_norm1, &h.post_ff_norm1},
                            {&l.router_proj, &h.router_proj},
                            {&l.router_scale, &h.router_scale},
                            {&l.per_expert_scale, &h.per_expert_scale},
                            {&l.pre_ff_norm2, &h.pre_ff_norm2},
                            {&l.post_ff_norm2, &h.post_ff_norm2},
                            {&l.post_ff_norm, &h.post_ff_norm}})
      *dst = up(*src, be);
    for (auto [dst, src] : {std::pair{&l.qkv_proj, &h.qkv_proj},
                            {&l.q_proj, &h.q_proj},
                            {&l.k_proj, &h.k_proj},
                            {&l.v_proj, &h.v_proj},
                            {&l.o_proj, &h.o_proj},
                            {&l.mlp_gate_up, &h.mlp_gate_up},
                            {&l.mlp_gate, &h.mlp_gate},
                            {&l.mlp_up, &h.mlp_up},
                            {&l.mlp_down, &h.mlp_down},
                            {&l.experts_gate_up, &h.experts_gate_up},
                            {&l.experts_down, &h.experts_down}})
      *dst = up(*src, be);
    w.layers.push_back(std::move(l));
  }
  const VisionWeights& hv = host.vision;
  VisionWeights& v = w.vision;
  v.patch_proj = up(hv.patch_proj, be);
  v.position_table = up(hv.position_table, be);
  v.std_bias = up(hv.std_bias, be);
  v.std_scale = up(hv.std_scale, be);
  v.embed_projection = up(hv.embed_projection, be);
  for (const VisionLayerWeights& h : hv.layers) {
    VisionLayerWeights l;
    for (auto [dst, src] : {std::pair{&l.input_norm, &h.input_norm},
                            {&l.post_attn_norm, &h.post_attn_norm},
                            {&l.pre_ff_norm, &h.pre_ff_norm},
                            {&l.post_ff_norm, &h.post_ff_norm},
                            {&l.q_norm, &h.q_norm},
                            {&l.k_norm, &h.k_norm}})
      *dst = up(*src, be);
    for (auto [dst, src] : {std::pair{&l.q_proj, &h.q_proj},
                            {&l.k_proj, &h.k_proj},
                            {&l.v_proj, &h.v_proj},
                            {&l.o_proj, &h.o_proj},
                            {&l.mlp_gate, &h.mlp_gate},
                            {&l.mlp_up, &h.mlp_up},
                            {&l.mlp_down, &h.mlp_down}})
      *dst = up(*src, be);
    v.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace dgemma
