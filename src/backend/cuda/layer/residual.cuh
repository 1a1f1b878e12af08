#pragma once
// The layer's residual junctions (backend.h AttnResidualArgs / FfnResidualArgs: the residual adds with
// the norms around them fused into one kernel each; host launchers, kernels in layer/residual.cu and
// layer/residual_kernel.cuh).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// Rows of n elements. residual_fusable: n a multiple of 8 that the kernels' plan takes (up to 16,384:
// residual::plan_for) and every pointer 16-byte aligned; otherwise the backend composes the junction
// of the separate ops (the same roundings: bit-identical). Null optional outputs are not written.
// qa / sa, qb / sb and qn / sn: the FP8 rows (backend.h Fp8Rows: u8 codes [rows, n], f32 scales [rows])
// of out_a, out_b and next_out, optional (null: not written, and without any the kernels do no FP8 work).
// m2_slots (FfnResidualArgs::m2_slots): with rows set, m2 is null and the kernel sums the MoE's slot rows
// itself ([rows * top_k, n] bf16, their order [rows, top_k] i32), bit for bit the combine's output.
struct MoeSlotRows {
  const uint16_t* rows = nullptr;
  const int32_t* order = nullptr;
  int top_k = 0;
};
bool residual_fusable(int64_t n, std::initializer_list<const void*> ptrs);
void launch_attn_residual(const uint16_t* x, const uint16_t* o, const uint16_t* post_norm, uint16_t* h1,
                          const uint16_t* norm_a, uint16_t* out_a, const uint16_t* norm_b, uint16_t* out_b,
                          uint16_t* o_normed, const uint16_t* router_scale, float router_root,
                          uint16_t* router_out, uint8_t* qa, float* sa, uint8_t* qb, float* sb, int64_t rows,
                          int64_t n, float eps, Stream stream);
void launch_ffn_residual(const uint16_t* h1, const uint16_t* m1, const uint16_t* m2, MoeSlotRows m2_slots,
                         const uint16_t* norm1, const uint16_t* norm2, const uint16_t* norm_f, float scale,
                         uint16_t* out, uint16_t* m1n, uint16_t* m2n, uint16_t* f, const uint16_t* next_norm,
                         uint16_t* next_out, uint8_t* qn, float* sn, int64_t rows, int64_t n, float eps,
                         Stream stream);

}  // namespace dgemma::cuda
