#pragma once
// Run-time knobs of the CUDA backend that tests use to reach code paths real sizes reach only with
// large inputs. Plain C++ (no CUDA headers).
#include <cstdint>

namespace dgemma::cuda {

// Kernel launches (dgemma's kernels and cuBLAS calls) issued so far by this process: benchmarks
// report launches per step from two readings.
uint64_t launches_so_far();
// Host waits for the stream (to_host, synchronize, synchronising copies) so far, and the time spent
// in them: a step whose host time is mostly waiting is GPU-bound, one with little waiting is
// host-bound (benchmarks report both per step).
uint64_t syncs_so_far();
uint64_t sync_wait_ns_so_far();
// The profiler's capture window (cudaProfilerStart / Stop): Nsight Compute run with
// --profile-from-start off sees only the kernels between the two (dgemma_bench --profile-step).
void profiler_start();
void profiler_stop();

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
// Head dims above `d` leave the flash kernel for the per-item path (cuBLAS + softmax); 0: no limit.
// Returns the previous value (no limit: 2^30).
int64_t set_flash_attention_max_dim(int64_t d);
// The flash kernel's variant for head dims 256 and 512 (A/B runs; read when planning): 0: the
// mma.sync kernel, D 256 one CTA of 4 warps, D 512 8 warps splitting the head dim (the variant off
// sm_90); 1: D 256 8 warps splitting the head
// dim, D 512 two output halves in CTAs of their own; 2: D 256 8 warps over 128 query rows (D 512 as
// 0); 3: the Hopper warpgroup-MMA kernel (flash_attention_wgmma_kernel.cuh: a producer warpgroup, two
// consumers; D 256 128 query rows a CTA, D 512 64 rows with the consumers splitting the head dim;
// sm_90 only, elsewhere as 0); 4 (the default): as 3 with key tiles of 80 instead of 64 for D 256
// (D 512 as 3). Measured on the H200 (dgemma_bench, whole denoising steps, docs/BENCHMARKS.md): 0 / 3 / 4
// 18.06 / 17.83 / 17.87 ms at batch 1, 36.53 / 35.28 / 34.94 at batch 4, 111.58 / 106.53 / 106.66 at
// batch 16. Returns the previous value.
int set_flash_attention_variant(int v);

// Whether the MoE block groups tokens by expert on the device and runs the grouped expert kernel (no
// host synchronisation) instead of grouping on the host for cuBLAS. Returns the previous value.
bool set_moe_device_grouping(bool on);

// Whether qkv_prologue runs the fused kernel (qkv_prologue.cu) instead of the rmsnorm / rope / copy
// sequence, and whether the MoE routing runs the register top-k that also groups the pairs by expert
// and the vectorised combine (moe.cu) instead of the earlier topk / group / combine kernels. On by
// default; bit-identical either way (benchmarks and checks compare them). Return the previous value.
bool set_fused_qkv_prologue(bool on);
bool set_fused_moe_routing(bool on);
// The launch shapes of the per-layer small kernels, for A/B runs (bit-identical either way): 0 (the
// default) as planned; 1: the residual junctions at two 16-byte words a thread (half the threads of a
// row); 2: the earlier shapes (the residual junctions' loop kernels, the MoE combine one block a
// token, the fused routing sixteen tokens a block, the qkv prologue one block a token with a warp a
// head row at a time, gelu_mul_halves without its table kernel). The environment's DGEMMA_SMALL_KERNELS (0 / 1 / 2)
// gives the start value. Returns the previous value.
int set_small_kernel_variant(int v);
// The bf16 grouped expert GEMM kernel of the device-grouped MoE (grouped_moe_kernel.cuh): 0 automatic
// (by rows per expert, the default), 1 the small kernel (32-row tiles looping over an expert's rows),
// 2 .. 10 the mma.sync tile-list shapes listed there, 11 .. 15 the wgmma ones and 16 .. 19 the
// warp-specialised TMA ones (sm_90; variant 2 on other GPUs). For benchmarks and tests. Returns the
// previous value.
constexpr int kGroupedMoeVariants = 19;
int set_grouped_moe_variant(int variant);
// Whether the fused MoE routing + grouping (moe_route.cu) places the (token, slot) pairs in a second
// kernel over the whole grid instead of in its last block (on, the default; DGEMMA_ROUTE_SPLIT=0
// sets the start value off). The same pairs bit for bit (dgemma_gpu_check moe_grouping on the H200);
// faster at every T despite the second launch, most where T is large (the last block's placement
// takes R / 2048 rounds of dependent loads): top-k + grouping 0.021 / 0.032 / 0.076 ms at T = 256 /
// 1,024 / 4,096 against 0.025 / 0.051 / 0.159 (dgemma_gpu_check --bench small). Returns the previous
// value.
bool set_route_split_placement(bool on);

// How upload_weight serves dense (2-D) quantised linears (FP8 attention / MLP, NVFP4 MLP); the experts
// stay quantised either way. The one rule (CudaBackend::placement):
//  * kW8A8 (the default): FP8 linears whose checkpoint prescribes dynamic per-token FP8 activations
//    (FP8-dynamic, weight.h ActQuant::kFp8Token) run as the checkpoint says: activations quantised
//    per token to E4M3 bit-identically to the CPU reference, then cuBLASLt's FP8 GEMM (fp8_gemm.h)
//    on the checkpoint's row-major weights. Only the summation order (and Hopper's FP8 adding, see
//    tests/gpu w8a8_dense) differs from the CPU reference. A shape cuBLASLt refuses (checked at
//    upload, logged once) and every other quantised linear take kKernel's path, so NVFP4's dense
//    linears are served as under kKernel. On the H200 (dgemma_gpu_check --bench w8a8) quantise +
//    GEMM takes 0.030 / 0.041 / 0.113 ms for the MLP gate|up at T = 256 / 1,024 / 4,096, against
//    bf16 cuBLAS's 0.026 / 0.046 / 0.137 and kKernel's 0.070 / 0.143 / 0.542; the FP8 26B step
//    (dgemma_bench, W8A16 experts) 18.18 ms at batch 1 and 43.66 at batch 4, against kKernel's 23.68
//    and 60.22 and kBf16's 16.80 and 43.87 (docs/BENCHMARKS.md), without kBf16's bf16 copies.
//  * kKernel: the W8A16 / W4A16 kernel (grouped_moe_fp4.cuh launch_dense_quant) on repacked weights,
//    activations bf16 (FP8-dynamic's activation rounding left out). It computes with the exact
//    dequantised weights; bf16 copies move each weight by up to 2^-9 (a non-power-of-two scale's
//    products), which took the FP8 fixture's logits past the CPU-vs-CUDA bound (NMSE 6.7e-4 >
//    2.5e-4, dgemma_gpu_check quant_forward_realistic_scales).
//  * kBf16: exact dequantisation to bf16 copies for cuBLAS (bf16's memory for those weights): an A/B
//    knob.
// dgemma_bench --dense-quant w8a8 | on | off; the environment's DGEMMA_DENSE_QUANT (the same words)
// gives the start value. Read at upload time (a weight keeps the path it was uploaded for). Returns
// the previous value.
enum class DenseQuant { kW8A8, kKernel, kBf16 };
DenseQuant set_dense_quant(DenseQuant path);
DenseQuant dense_quant();  // the current path
// "w8a8" / "on" / "off" to the path (false for any other word), and back.
bool parse_dense_quant(const char* word, DenseQuant* out);
const char* dense_quant_name(DenseQuant path);

// Whether upload_weight keeps FP8-dynamic expert stacks (per-token FP8 activations prescribed) for
// the W8A8 grouped kernels on FP8 wgmma (grouped_moe_w8a8.cuh: activations quantised per row as the
// CPU reference does, the checkpoint's E4M3 weights unrepacked; sm_90, Kd % 16, rows % 8) instead of
// the W8A16 ones. On by default: the checkpoint's own maths, and faster from ~64 rows an expert. The
// 26B MoE block on the H200 (dgemma_gpu_check --bench w8a8): W8A8 0.439 / 0.618 / 1.015 / 1.789 ms
// at T = 256 / 1,024 / 2,048 / 4,096, W8A16 0.363 / 0.868 / 1.843 / 3.365; the FP8 step (dgemma_bench,
// dense W8A8) 20.46 ms at batch 1 and 35.95 at batch 4, against W8A16's 18.18 and 43.66. One layout
// is resident (the choice is made at upload, not per step), so a deployment that serves one stream
// at a time can take W8A16's 2.3 ms with DGEMMA_FP8_MOE=w8a16, which sets the start value off (any
// other value: on). Read at upload time. Returns the previous value.
bool set_fp8_moe_w8a8(bool on);
bool fp8_moe_w8a8();
// The W8A8 grouped kernels' tile shape: 1 64 x 128 (one warpgroup, 2 CTAs an SM), 2 128 x 128 (two
// warpgroups); 0 automatic (64 x 128, measured faster at every T: grouped_moe_w8a8_kernel.cuh).
// Environment DGEMMA_W8A8_MOE_TILE. Returns the previous value.
constexpr int kW8a8MoeTiles = 2;  // ids 1 .. 2
int set_w8a8_moe_tile(int variant);

// Whether upload_weight keeps FP8 weights quantised for the W8A16 kernels (true, the default) or
// serves them from exact bf16 copies (false: bf16's memory and speed; an A/B for benchmarks). The
// environment's DGEMMA_FP8_KERNELS=0 sets the start value false. Read at upload time. Returns the
// previous value.
bool set_fp8_weight_kernels(bool on);

// Whether the sampler reads z = softcap * tanh(x / softcap) / T from a per-canvas table of the 65,536
// bf16 values (built by one small kernel, the same function: bit-identical z) instead of evaluating
// it per element. Returns the previous value; the bench compares the two.
bool set_sampler_z_table(bool on);
// The sampler's main pass (slice_stats_kernel) over 8 consecutive logits a thread and round (true,
// the default) or one (false), and its register budget: 2 blocks an SM with 64 registers a thread
// (default), or 1 with up to 128. Benchmark knobs (dgemma_gpu_check --bench tail). Return the
// previous values.
bool set_sampler_vector_sweep(bool on);
int set_sampler_stats_blocks(int blocks);
// Which main pass the sampler runs: the lean one (true, the default: slice_stats_kernel in
// sampler_stats_kernel.cuh — the entropy sums and the probabilities' denominator from an e^z table,
// 32-bit indices, the base-2 noise estimate, the exact noise of the screen's candidates deferred to
// the end of the slice) or the earlier one (false: slice_stats_earlier_kernel). The same argmax and
// sample, the sums within the same bounds; an A/B knob (dgemma_gpu_check --bench tail and the
// sampler checks run both). Read at launch (a captured graph keeps the pass it captured). The
// environment's DGEMMA_SAMPLER_LEAN=0 sets the start value off (whole-step A/B runs with dgemma_bench).
// Returns the previous value.
bool set_sampler_lean_sweep(bool on);
// Tile variant of the W4A16 / W8A16 grouped expert kernels (grouped_moe_fp4_kernel.cuh kQuantTiles),
// M rows x N columns per CTA, warps, cp.async stages: 1 BM16 x BN64 4 warps 4 stages, 2 BM32 x 64,
// 3 BM64 x 64, 4 BM32 x 128 (8 warps), 5 BM64 x 128 (8 warps), 6 BM128 x 64, 7 BM16 x 64 8 stages,
// 8 BM32 x 64 6 stages, 9 BM32 x 128 8 warps 6 stages; the wgmma kernel (sm_90; elsewhere the
// automatic mma.sync choice): 10 BM64 x 128 one warpgroup, 11 BM128 x 128 two warpgroups, 12 BM128 x
// 256 two warpgroups; 0 automatic (by the mean rows per expert: mma.sync, or
// with set_quant_wgmma wgmma above ~40 rows), for gate_up and down separately. The environment's
// DGEMMA_QUANT_MOE_TILE ("gu", "gu,down" or "gu,down,m_split") gives the start values. m_split: the
// wgmma kernel's CTAs per N tile and expert, each taking every m_split-th M tile (0 automatic, 1 ..
// 16). Returns the previous values.
constexpr int kQuantMoeTileCount = 13;  // ids 0 .. 12
struct QuantMoeTiles {
  int gate_up = 0, down = 0;
  int m_split = 0;
};
QuantMoeTiles set_quant_moe_tiles(QuantMoeTiles t);
// The same for the dense quantised matmul (launch_dense_quant; 0 automatic: BM32, or BM128 from 128
// rows on; with set_quant_wgmma, the wgmma 64-row tiles from 64 rows on); environment
// DGEMMA_QUANT_DENSE_TILE. Returns the previous id.
int set_quant_dense_tile(int variant);
// Whether the automatic choices above take the wgmma kernel (sm_90): grouped experts above ~40 rows per
// expert, dense matmuls from 64 rows. Off by default: on the H200 (dgemma_gpu_check --bench quant, the
// 26B MoE block) its best tile is no faster than the best mma.sync one where it could pay (NVFP4
// 0.716 / 1.202 / 2.132 ms at T = 1,024 / 2,048 / 4,096 against 0.671 / 1.165 / 2.155; FP8 0.733 /
// 1.203 / 2.183 against 0.691 / - / 2.262) and slower below; the NVFP4 step at batch 4 is the same
// with it. The weight decode, not the MMA, bounds both. It is checked against the CPU reference and
// bit for bit against the mma.sync kernel (dgemma_gpu_check quant_wgmma, fp4_moe_* tiles 10 .. 12); the
// tile ids 10 .. 12 run it when asked for either way. The environment's DGEMMA_QUANT_WGMMA=1 sets the
// start value. Returns the previous value.
bool set_quant_wgmma(bool on);

}  // namespace dgemma::cuda
