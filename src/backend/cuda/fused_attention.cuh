#pragma once
// Fused attention (one kernel launch; fused_attention.cu) with the rounding points of the CPU reference
// and of the cuBLAS path in cuda_attention.cpp. Host launcher only.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dgemma::cuda {

// out[i, h, :] = bf16(sum_j P[i, h, j] * V[j]) for the n new queries, q [n, Hq, D]; keys and values are
// the first L rows of k_cache / v_cache ([Hkv, cap, D]; may be null when L == 0) followed by k_new /
// v_new ([n, Hkv, D]); P = bf16(softmax_fp32(bf16(bf16(q . k) * scaling))) over the visible keys
// (causal: key j visible iff 0 <= i - (j - L) < window, window <= 0: no window). All bf16.
// Returns false, launching nothing, when the shape or the device is not supported (D not in
// {64, 128, 256, 512}, a pointer not 16-byte aligned, too little shared memory, grid too large); the
// caller then takes another path.
bool launch_fused_attention(const uint16_t* q, const uint16_t* k_cache, const uint16_t* v_cache,
                            const uint16_t* k_new, const uint16_t* v_new, uint16_t* out, int64_t n, int64_t Hq,
                            int64_t Hkv, int64_t D, int64_t L, int64_t cap, bool causal, int64_t window,
                            float scaling, int device, cudaStream_t stream);

}  // namespace dgemma::cuda
