#pragma once
// The attention prologue of a layer in one launch (backend.h QkvPrologueArgs; kernel in
// layer/qkv_prologue.cu): per head q_norm + RoPE on q, k_norm + RoPE on k, the unit norm of v (K=V: of the
// raw k, written to v), each row read once, with the rounding points of rmsnorm + rope.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>

#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// Whether the fused kernel takes a head dim D and these buffers: D a multiple of 16 up to 512 (one
// warp per head row, as launch_rmsnorm's warp kernel, so the sums of squares run in its order) and
// every pointer 16-byte aligned. Otherwise the caller composes the unfused ops.
bool qkv_prologue_fusable(int64_t D, std::initializer_list<const void*> ptrs);

// q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D] in place (k_eq_v: v is output only); q_norm, k_norm [D];
// positions i32 [T]; inv_freq f32 [D / 2]. With `qkv` (the fused projection [T, (Hq + Hkv (+ Hkv)) D],
// 16-byte aligned) the inputs are its column blocks and q / k / v are outputs only.
void launch_qkv_prologue(uint16_t* q, uint16_t* k, uint16_t* v, bool k_eq_v, const uint16_t* q_norm,
                         const uint16_t* k_norm, const int32_t* positions, const float* inv_freq, int64_t T,
                         int64_t Hq, int64_t Hkv, int64_t D, float eps, Stream stream,
                         const uint16_t* qkv = nullptr);

}  // namespace dgemma::cuda
