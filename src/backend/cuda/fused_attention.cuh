#pragma once
// Fused attention (fused_attention.cu) with the rounding points of the CPU reference and of the cuBLAS
// path in cuda_attention.cpp. Host side only: plan a call (key splits, workspace size), then launch.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace dgemma::cuda {

// How one call runs: the key range of every row block is cut into `splits` parts that separate CTAs
// walk in parallel (flash-decoding style); their partial softmax statistics and partial fp32 outputs
// go through a device workspace of `workspace_bytes` and are combined in a fixed order.
struct FusedAttentionPlan {
  int splits = 0;  // 0: the shape or the device is not supported (take another path)
  int64_t workspace_bytes = 0;
};

// The plan for out[n, Hq, D] over L cached keys and n new ones (see launch_fused_attention). Not
// supported: D not in {64, 128, 256, 512}, Hq not a multiple of Hkv, a device below sm_80 or with too
// little shared memory, a grid too large. Depends on the device (SM count), so the same call on the
// same device always gets the same plan (runs are bit-identical).
FusedAttentionPlan plan_fused_attention(int64_t n, int64_t Hq, int64_t Hkv, int64_t D, int64_t L, bool causal,
                                        int64_t window, int device);

// out[i, h, :] = bf16(sum_j P[i, h, j] * V[j]) for the n new queries, q [n, Hq, D]; keys and values are
// the first L rows of k_cache / v_cache ([Hkv, cap, D]; may be null when L == 0) followed by k_new /
// v_new ([n, Hkv, D]); P = bf16(softmax_fp32(bf16(bf16(q . k) * scaling))) over the visible keys
// (causal: key j visible iff 0 <= i - (j - L) < window, window <= 0: no window). All bf16.
// `plan` comes from plan_fused_attention with the same shape; `workspace` is device memory of at least
// plan.workspace_bytes, 16-byte aligned. Returns false, launching nothing, when the plan is empty or
// a pointer is not 16-byte aligned; the caller then takes another path.
// A paged cache instead of contiguous ones: k_cache / v_cache are one layer's pools [pages, Hkv, P, D]
// with P = 2^page_shift, and cached key j is absolute position first + j, in page table[pos / P].
struct PagedCache {
  const int32_t* table = nullptr;  // device
  int64_t first = 0;
  int page_shift = 0;
};

bool launch_fused_attention(const FusedAttentionPlan& plan, void* workspace, const uint16_t* q,
                            const uint16_t* k_cache, const uint16_t* v_cache, const uint16_t* k_new,
                            const uint16_t* v_new, uint16_t* out, int64_t n, int64_t Hq, int64_t Hkv,
                            int64_t D, int64_t L, int64_t cap, bool causal, int64_t window, float scaling,
                            int device, cudaStream_t stream, const PagedCache* paged = nullptr);

// Tests: forces the number of key splits of every plan (clamped to [1, 64]; 0 restores the automatic
// choice). Returns the previous setting.
int set_fused_attention_splits(int splits);

}  // namespace dgemma::cuda
