#pragma once
// W4A16 grouped expert GEMMs for NVFP4 experts and W8A16 ones for FP8 experts (kernels in
// quant/weight_only.cu): the device grouping of moe/grouped.cuh (offsets, pairs), bf16 activations, weights
// kept packed on the device. Weights (backend/weight.h, stacked experts): packed [E, Nw, Kd/2] u8 (element 2j
// in the low nibble), block [E, Nw, Kd/16] f8e4m3 (finite, non-negative), both in the device layout of
// quant/layout.h (CudaBackend::upload_weight repacks them on a host copy), row_scale [E, Nw] f32 (the global
// scale of each row's projection: gate and up rows keep their own).
// Maths, as the CPU reference (quant_reference.h, cpu/moe.cpp): every output element is
//   bf16( row_scale[n] * sum_k x[k] * (e2m1(q[n, k]) * block[n, k / 16]) )
// with the fp32 sum on tensor cores: e2m1 * block is exact in bf16 (at most 6 significant bits), so
// the weights enter mma.sync as exact bf16 values, dequantised in registers; the row scale is applied
// once in the epilogue, then the activation (gate_up) or the routing weight (down) as the bf16 kernels.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/core/stream.h"
#include "backend/cuda_options.h"

namespace dgemma::cuda {

// Shapes these kernels take: Kd a multiple of 64 (whole K stages, 16-byte aligned packed rows and scale
// runs), output rows (N, 2N) multiples of 8, 16-byte aligned packed data and block
// scales.
bool grouped_fp4_supported(int64_t rows, int64_t Kd, const void* packed, const void* block);

// act[r, i] = bf16(bf16(gelu_tanh(bf16(g))) * bf16(u)), g = rs[e, i] * x[t] . Wg[i], u = rs[e, I + i] *
// x[t] . Wu[i] for the grouped rows r of expert e (t = pairs[r] / K). `tile`: kAuto (by the mean rows
// per expert) or the tile of every launch; likewise below.
void launch_grouped_gate_up_fp4(const uint16_t* x, const uint8_t* packed, const uint8_t* block, const float* row_scale,
                                const int32_t* offsets, const int32_t* pairs, int64_t R, int64_t E, int64_t K,
                                int64_t H, int64_t I, uint16_t* act, QuantTile tile, Stream stream);

// y[p, h] = bf16(bf16(rs[e, h] * act[r] . down[e, h]) * top_w[p]), p = pairs[r]. after_gate_up (sm_90+,
// right after launch_grouped_gate_up_*): launched programmatically, so its blocks may start during
// gate_up's last ones, copying their first weight stages before they wait for act.
void launch_grouped_down_fp4(const uint16_t* act, const uint8_t* packed, const uint8_t* block, const float* row_scale,
                             const int32_t* offsets, const int32_t* pairs, const float* top_w, int64_t R, int64_t E,
                             int64_t H, int64_t I, uint16_t* y, QuantTile tile, bool after_gate_up, Stream stream);

// FP8 experts, W8A16 (the same kernel with E4M3 weights [E, Nw, Kd] and per-channel row scales,
// no block scales): y = bf16(row_scale[n] * sum_k x[k] * e4m3(w[n, k])). The checkpoint prescribes
// dynamic per-token FP8 activations (W8A8); these kernels keep the activations bf16 (W8A16), which
// needs no FP8 tensor-core path and at ~16 rows per expert is bound by the same weight bytes; the
// per-token quantisation's deviation (~2^-5 relative noise per input) is left out, so the result is
// the checkpoint's weights without its activation rounding. Same shape rule as NVFP4.
bool grouped_fp8_supported(int64_t rows, int64_t Kd, const void* weights);
void launch_grouped_gate_up_fp8(const uint16_t* x, const uint8_t* w, const float* row_scale, const int32_t* offsets,
                                const int32_t* pairs, int64_t R, int64_t E, int64_t K, int64_t H, int64_t I,
                                uint16_t* act, QuantTile tile, Stream stream);
void launch_grouped_down_fp8(const uint16_t* act, const uint8_t* w, const float* row_scale, const int32_t* offsets,
                             const int32_t* pairs, const float* top_w, int64_t R, int64_t E, int64_t H, int64_t I,
                             uint16_t* y, QuantTile tile, bool after_gate_up, Stream stream);

// A dense quantised matmul with the same kernel (W4A16 / W8A16): out[T, N] = bf16(row_scale[n] *
// x[t] . W[n]) for a 2-D weight [N, K] in the device layout; kAuto: one CTA row per 32 rows of x, or
// per 128 rows when T >= 128 (each CTA row decodes the weight tiles again, from L2). Shape rule:
// grouped_fp4_supported / grouped_fp8_supported.
void launch_dense_quant(bool fp8, const uint16_t* x, const uint8_t* w, const uint8_t* block, const float* row_scale,
                        int64_t T, int64_t N, int64_t K, uint16_t* out, QuantTile tile, Stream stream);

}  // namespace dgemma::cuda
