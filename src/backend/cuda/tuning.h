#pragma once
// Run-time knobs of the CUDA backend that tests use to reach code paths real sizes reach only with
// large inputs. Plain C++ (no CUDA headers).
#include <cstdint>

namespace dgemma::cuda {

// Kernel launches (dgemma's kernels and cuBLAS calls) issued so far by this process: benchmarks
// report launches per step from two readings.
uint64_t launches_so_far();

// Upper bound of attention's bf16 score buffer per call (default 256 MiB); queries are processed in
// chunks that fit. Returns the previous value.
int64_t set_attention_score_budget(int64_t bytes);

// Whether attention runs the fused kernel (fused_attention.cu; head dims 64/128/256/512) instead of
// the cuBLAS score / softmax / P.V path. Off by default: a whole model step measured slower with it
// (cuda_attention.cpp). Returns the previous value; tests and benchmarks compare the two.
bool set_fused_attention(bool on);
// With the fused kernel on: only head dims <= d take it (<= 0: all). Returns the previous limit.
int64_t set_fused_attention_max_dim(int64_t d);
// Whether attention_batch runs the one-launch flash kernel (flash_attention.cu; head dims
// 64/128/256/512) for all items of a layer instead of attention() per item (the cuBLAS path above).
// On by default (a whole model step measured faster with it, cuda_attention.cpp). Returns the
// previous value.
bool set_flash_attention(bool on);
// The flash kernel's variant for head dims 256 and 512 (A/B runs; read when planning): 0 (default):
// D 256 one CTA of 4 warps, D 512 8 warps splitting the head dim; 1: D 256 8 warps splitting the head
// dim, D 512 two output halves in CTAs of their own; 2: D 256 8 warps over 128 query rows (D 512 as
// 0). Returns the previous value.
int set_flash_attention_variant(int v);

// Whether the MoE block groups tokens by expert on the device and runs the grouped expert kernel (no
// host synchronisation) instead of grouping on the host for cuBLAS. Returns the previous value.
bool set_moe_device_grouping(bool on);

// Whether upload_weight keeps dense quantised linears (FP8 attention / MLP, NVFP4 MLP) quantised for
// the W8A16 / W4A16 kernel (grouped_moe_fp4.cuh launch_dense_quant) instead of dequantising them to
// bf16 for cuBLAS. On by default (half / a quarter of the bytes; its speed against cuBLAS bf16 is to
// be measured: dgemma_bench --dense-quant on|off). Read at upload time. Returns the previous value.
bool set_dense_quant_weights(bool on);

}  // namespace dgemma::cuda
