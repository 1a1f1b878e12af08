// The MoE block on the GPU (cpu/moe.cpp is the spec):
//   router: z = bf16(bf16(bf16(rmsnorm0(h1)) * scale) * H^-0.5) (layer/norm.cu, or precomputed by the
//           attention's residual junction), bf16 logits = z . W_r^T (cuBLAS), fp32 softmax, top-k,
//           renormalised weights * per_expert_scale, fused with the grouping of the (token, slot)
//           pairs by expert (moe/route.cu);
//   experts: per expert one gate_up GEMM and one down GEMM as grouped kernels over every expert, with
//           the gather, the activation (gelu(gate) * up) and the routing weight fused (moe/grouped.cu,
//           the quantised forms in quant/weight_only.cu / quant/w8a8_experts.cu), then per token a bf16
//           running sum in ascending expert order (moe/combine.cu), or, with MoeArgs::out_slots, the slot
//           rows and their order for the FFN junction to sum (layer/residual_kernel.cuh). No host
//           synchronisation, fixed grids: a step's MoE records into a CUDA graph. The shapes these
//           kernels take (grouped_moe_supported, moe_route_supported) are checked when a model is loaded.
// Expert parallelism (MoeArgs::expert_first / collective): the router and the grouping run over every
// expert as on one GPU (the same tile list), the grouped GEMMs over the rank's experts only (their tile
// entries renumbered, the others skipped; offsets from the rank's first expert), into slot rows filled
// with -0 beforehand; the exact sum over the ranks then gives every rank the one-GPU slot rows.
#include "backend/cuda/moe/moe.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "backend/collective.h"
#include "backend/cuda/core/check.h"
#include "backend/cuda/layer/norm.cuh"
#include "backend/cuda/moe/combine.cuh"
#include "backend/cuda/moe/grouped.cuh"
#include "backend/cuda/moe/route.cuh"
#include "backend/cuda/parallel/shard_kernels.cuh"
#include "backend/cuda/quant/fp8_gemm.h"
#include "backend/cuda/quant/w8a8_experts.cuh"
#include "backend/cuda/quant/weight_only.cuh"
#include "util/error.h"

namespace dgemma::cuda {

void moe(const Context& ctx, const MoeArgs& a) {
  const char* op = "moe";
  need_type(a.router_in, ScalarType::kBF16, op, "router_in");
  need_type(a.expert_in, ScalarType::kBF16, op, "expert_in");
  need_type(a.router_scale, ScalarType::kBF16, op, "router_scale");
  need_type(a.router_proj, ScalarType::kBF16, op, "router_proj");
  need_type(a.per_expert_scale, ScalarType::kBF16, op, "per_expert_scale");
  // NVFP4 and FP8 experts stay quantised (W4A16 / W8A16 kernels, quant/weight_only.cuh); else bf16.
  const WeightFormat f_gu = a.gate_up.format, f_dn = a.down.format;
  const bool fp4_gu = f_gu == WeightFormat::kNvfp4, fp4_dn = f_dn == WeightFormat::kNvfp4;
  const bool fp8_gu = f_gu == WeightFormat::kFp8Channel, fp8_dn = f_dn == WeightFormat::kFp8Channel;
  const Tensor& gate_up = a.gate_up.quantized() ? a.gate_up.data : bf16_weight(a.gate_up, op, "gate_up");
  const Tensor& down = a.down.quantized() ? a.down.data : bf16_weight(a.down, op, "down");
  // The output: the summed rows, or the slot rows and their order for the FFN junction to sum.
  const bool slots = !a.out_slots.empty();
  if (slots) {
    DG_CHECK(a.out.empty());
    need_type(a.out_slots, ScalarType::kBF16, op, "out_slots");
    need_type(a.out_order, ScalarType::kI32, op, "out_order");
  } else {
    need_type(a.out, ScalarType::kBF16, op, "out");
  }
  const int64_t T = a.router_in.dim(0), H = a.router_in.dim(1);
  const int64_t E = a.router_proj.dim(0);
  // The rank's experts [e0, e0 + El) (all of them without expert parallelism).
  const int64_t El = gate_up.dim(0), e0 = a.expert_first;
  const bool ep = a.collective != nullptr;
  const int64_t I2 = a.gate_up.rows(), I = I2 / 2;
  const int64_t K = a.top_k;
  DG_CHECK(a.router_in.ndim == 2 && a.expert_in.ndim == 2 && a.expert_in.dim(0) == T && a.expert_in.dim(1) == H);
  DG_CHECK(a.router_proj.dim(1) == H && a.router_scale.numel() == H && a.per_expert_scale.numel() == E);
  DG_CHECK(gate_up.ndim == 3 && e0 >= 0 && El >= 1 && e0 + El <= E && a.gate_up.cols() == H && I2 % 2 == 0);
  DG_CHECK(ep || (e0 == 0 && El == E));
  DG_CHECK(down.ndim == 3 && down.dim(0) == El && down.dim(1) == H && a.down.cols() == I);
  if (fp4_gu) DG_CHECK(grouped_fp4_supported(I2, H, gate_up.data, a.gate_up.block.data));
  if (fp4_dn) DG_CHECK(grouped_fp4_supported(H, I, down.data, a.down.block.data));
  // FP8 experts uploaded for W8A8 keep act kFp8Token (CudaBackend::placement), the W8A16 ones kNone.
  const bool w8a8_gu = fp8_gu && a.gate_up.act == ActQuant::kFp8Token, w8a8_dn = fp8_dn && a.down.act == ActQuant::kFp8Token;
  if (fp8_gu) DG_CHECK(w8a8_gu ? grouped_w8a8_supported(I2, H, gate_up.data) : grouped_fp8_supported(I2, H, gate_up.data));
  if (fp8_dn) DG_CHECK(w8a8_dn ? grouped_w8a8_supported(H, I, down.data) : grouped_fp8_supported(H, I, down.data));
  if ((w8a8_gu || w8a8_dn) && (!a.gate_up.quantized() || !a.down.quantized()))
    fail(ErrorKind::kUnsupported, "CUDA moe: W8A8 experts with a bf16 projection (one tile list for both kernels)");
  DG_CHECK(K >= 1 && K <= E);
  DG_CHECK(slots ? a.out_slots.numel() == T * K * H && a.out_order.numel() == T * K : a.out.numel() == T * H);
  if (!a.dbg_probs.empty()) DG_CHECK(a.dbg_probs.device == Device::kCpu && a.dbg_probs.numel() == T * E);
  if (!a.dbg_weights.empty()) DG_CHECK(a.dbg_weights.device == Device::kCpu && a.dbg_weights.numel() == T * K);
  if (!a.dbg_index.empty()) DG_CHECK(a.dbg_index.device == Device::kCpu && a.dbg_index.numel() == T * K);
  if (!a.expert_in_fp8.empty()) check_fp8_input(a.expert_in_fp8, a.gate_up, T, Device::kCuda, op);
  if (T == 0) return;
  if (!grouped_moe_supported(T, H, I, E, K, a.expert_in.data, gate_up.data, down.data) || !moe_route_supported(E, K))
    fail(ErrorKind::kUnsupported, "CUDA moe: no kernels for this shape (T={}, H={}, I={}, E={}, K={})", T, H, I, E, K);
  const Stream st = ctx.stream;

  // 1. Router.
  const float root = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
  Tensor z = a.router_z;  // precomputed by the attention's residual junction, or here
  if (z.empty()) {
    z = ctx.alloc(ScalarType::kBF16, {T, H});
    launch_router_norm(a.router_in.ptr<uint16_t>(), a.router_scale.ptr<uint16_t>(), root, z.ptr<uint16_t>(), T, H, a.eps, st);
  } else {
    need_type(z, ScalarType::kBF16, op, "router_z");
    DG_CHECK(z.numel() == T * H);
  }
  Tensor logits = ctx.alloc(ScalarType::kBF16, {T, E});
  Gemm r;
  r.a = z.ptr<uint16_t>();
  r.lda = H;
  r.b = a.router_proj.ptr<uint16_t>();
  r.ldb = H;
  r.c = logits.data;
  r.ldc = E;
  r.M = T;
  r.N = E;
  r.K = H;
  gemm(ctx, r);
  Tensor probs;
  if (!a.dbg_probs.empty()) probs = ctx.alloc(ScalarType::kF32, {T, E});
  Tensor top_idx = ctx.alloc(ScalarType::kI32, {T, K});
  Tensor top_w = ctx.alloc(ScalarType::kF32, {T, K});
  Tensor order = slots ? a.out_order : ctx.alloc(ScalarType::kI32, {T, K});
  float* probs_ptr = probs.empty() ? nullptr : probs.ptr<float>();

  // The routing's debug outputs (tests), copied to the host after the routing kernels; true if any.
  auto queue_debug_copies = [&] {
    auto copy = [&](const Tensor& host, const Tensor& dev) {
      if (!host.empty()) CUDA_CHECK(cudaMemcpyAsync(host.data, dev.data, host.nbytes(), cudaMemcpyDeviceToHost, st));
    };
    copy(a.dbg_probs, probs);
    copy(a.dbg_weights, top_w);
    copy(a.dbg_index, top_idx);
    return !a.dbg_probs.empty() || !a.dbg_weights.empty() || !a.dbg_index.empty();
  };

  // The top-k and the grouping by expert in one pass (the tile list: int4 entries of plan.tile_rows
  // rows), then the grouped expert kernels. Nothing waits on the host unless debug outputs were asked
  // for (tests only).
  const int64_t R = T * K;
  Tensor offsets = ctx.alloc(ScalarType::kI32, {E + 1});
  Tensor pairs = ctx.alloc(ScalarType::kI32, {R});
  // The bf16 GEMMs' kernel and tile list (4 i32 an entry); with quantised experts (no list) a bf16
  // projection, if any, takes the small-rows kernel. W8A8 experts: the FP8 wgmma kernels' list.
  const bool any_quant = fp8_gu || fp4_gu || fp8_dn || fp4_dn;
  const GroupedPlan plan = w8a8_gu || w8a8_dn ? grouped_w8a8_plan(R, E, ctx.options.moe)
                           : any_quant        ? GroupedPlan{}
                                              : grouped_moe_plan(R, E, ctx.options.moe, ctx.hopper());
  Tensor tiles;
  if (plan.max_tiles > 0) tiles = ctx.alloc(ScalarType::kI32, {4 * plan.max_tiles});
  int32_t* tiles_ptr = plan.max_tiles > 0 ? tiles.ptr<int32_t>() : nullptr;
  Tensor scratch = ctx.alloc(ScalarType::kI32, {moe_route_group_scratch(T, E, K)});
  launch_moe_route_group(logits.ptr<uint16_t>(), T, E, K, a.per_expert_scale.ptr<uint16_t>(), probs_ptr,
                         top_idx.ptr<int32_t>(), top_w.ptr<float>(), order.ptr<int32_t>(), offsets.ptr<int32_t>(),
                         pairs.ptr<int32_t>(), tiles_ptr, plan.max_tiles, plan.tile_rows, scratch.ptr<int32_t>(),
                         ctx.ticket, st);
  const QuantTile tile = ctx.options.quant_experts;
  const int32_t* loff = offsets.ptr<int32_t>() + e0;
  if (ep)
    launch_moe_tiles_local(tiles_ptr, plan.max_tiles, static_cast<int>(e0), static_cast<int>(e0 + El), st);
  Tensor act = ctx.alloc(ScalarType::kBF16, {R, I});
  Tensor y = slots ? a.out_slots : ctx.alloc(ScalarType::kBF16, {R, H});
  if (ep) launch_fill_u16(y.ptr<uint16_t>(), R * H, 0x8000, st);  // other ranks' slots: -0
  if (w8a8_gu) {  // the input quantised per token (the CPU's per routed row: the same rows), or given so
    Fp8Rows xq = a.expert_in_fp8;
    if (xq.empty()) {
      xq = Fp8Rows{ctx.alloc(ScalarType::kU8, {T, H}), ctx.alloc(ScalarType::kF32, {T})};
      launch_quantize_fp8_rows(a.expert_in.ptr<uint16_t>(), T, H, xq.codes.ptr<uint8_t>(),
                               xq.scales.ptr<float>(), st);
    }
    const uint8_t* q = xq.codes.ptr<uint8_t>();
    DG_CHECK((reinterpret_cast<uintptr_t>(q) & 15u) == 0);
    launch_grouped_gate_up_w8a8(plan, q, xq.scales.ptr<float>(), gate_up.ptr<uint8_t>(),
                                a.gate_up.row_scale.ptr<float>(), loff, pairs.ptr<int32_t>(), tiles_ptr, R,
                                El, K, H, I, act.ptr<uint16_t>(), st);
  } else if (fp8_gu)
    launch_grouped_gate_up_fp8(a.expert_in.ptr<uint16_t>(), gate_up.ptr<uint8_t>(),
                               a.gate_up.row_scale.ptr<float>(), loff, pairs.ptr<int32_t>(), R, El, K, H, I,
                               act.ptr<uint16_t>(), tile, st);
  else if (fp4_gu)
    launch_grouped_gate_up_fp4(a.expert_in.ptr<uint16_t>(), gate_up.ptr<uint8_t>(),
                               a.gate_up.block.ptr<uint8_t>(), a.gate_up.row_scale.ptr<float>(), loff,
                               pairs.ptr<int32_t>(), R, El, K, H, I, act.ptr<uint16_t>(), tile, st);
  else
    launch_grouped_gate_up(plan, a.expert_in.ptr<uint16_t>(), gate_up.ptr<uint16_t>(), loff,
                           pairs.ptr<int32_t>(), tiles_ptr, R, El, K, H, I, act.ptr<uint16_t>(), st);
  if (w8a8_dn) {  // the activation quantised per grouped row
    Tensor q = ctx.alloc(ScalarType::kU8, {R, I}), s = ctx.alloc(ScalarType::kF32, {R});
    launch_quantize_fp8_rows(act.ptr<uint16_t>(), R, I, q.ptr<uint8_t>(), s.ptr<float>(), st);
    launch_grouped_down_w8a8(plan, q.ptr<uint8_t>(), s.ptr<float>(), down.ptr<uint8_t>(),
                             a.down.row_scale.ptr<float>(), loff, pairs.ptr<int32_t>(), tiles_ptr,
                             top_w.ptr<float>(), R, El, H, I, y.ptr<uint16_t>(), st);
  } else if (fp8_dn)
    launch_grouped_down_fp8(act.ptr<uint16_t>(), down.ptr<uint8_t>(), a.down.row_scale.ptr<float>(), loff,
                            pairs.ptr<int32_t>(), top_w.ptr<float>(), R, El, H, I, y.ptr<uint16_t>(), tile,
                            ctx.hopper() && fp8_gu && !w8a8_gu, st);
  else if (fp4_dn)
    launch_grouped_down_fp4(act.ptr<uint16_t>(), down.ptr<uint8_t>(), a.down.block.ptr<uint8_t>(),
                            a.down.row_scale.ptr<float>(), loff, pairs.ptr<int32_t>(), top_w.ptr<float>(), R,
                            El, H, I, y.ptr<uint16_t>(), tile, ctx.hopper() && fp4_gu, st);
  else
    launch_grouped_down(plan, act.ptr<uint16_t>(), down.ptr<uint16_t>(), loff, pairs.ptr<int32_t>(),
                        tiles_ptr, top_w.ptr<float>(), R, El, H, I, y.ptr<uint16_t>(), st);
  if (ep) a.collective->all_reduce_sum(y);  // every slot from the rank holding its expert (exact)
  if (!slots) launch_moe_combine(y.ptr<uint16_t>(), order.ptr<int32_t>(), T, K, H, a.out.ptr<uint16_t>(), st);
  if (queue_debug_copies()) ctx.sync();
}

}  // namespace dgemma::cuda
