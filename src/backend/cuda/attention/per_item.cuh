#pragma once
// Attention kernels around the cuBLAS score and P.V GEMMs (host launchers; kernels in attention/per_item.cu,
// orchestration in attention/attention.cpp).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/attention_keys.h"
#include "backend/cuda/core/stream.h"

namespace dgemma::cuda {

// qh[h, il, :] = q[i0 + il, h, :] for il < nc: query rows grouped by head, so the rows of one KV head's
// query group form one [groups * nc, D] matrix.
void launch_attn_gather_q(const uint16_t* q, int64_t Hq, int64_t D, int64_t i0, int64_t nc, uint16_t* qh,
                          Stream stream);

// In place over the bf16 score rows S[h * nc + il, :] (row stride ld): cached key j < L sits in column j,
// new key j >= L in column Lpad + (j - L) (L = rule.L, n = rule.n). Masked scores are excluded; then
//   s = bf16(s * scaling), p = exp(s - max) / sum(exp(s - max)) in fp32, stored as bf16(p) (0 if masked).
// Query il has index i0 + il among the n new tokens and sees the keys query_keys(rule, i0 + il) names
// (backend/attention_keys.h; rule.blocks in device memory).
void launch_attn_softmax(uint16_t* S, int64_t rows, int64_t ld, int64_t nc, int64_t Lpad, int64_t i0,
                         const ItemKeys& rule, float scaling, Stream stream);

// out[i0 + il, h, :] = bf16(oh[h, il, :]) (fp32 P.V results back to the [n, Hq, D] layout).
void launch_attn_scatter_out(const float* oh, int64_t Hq, int64_t D, int64_t i0, int64_t nc, uint16_t* out,
                             Stream stream);

}  // namespace dgemma::cuda
