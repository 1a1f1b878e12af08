#pragma once
// Run-time knobs of the CUDA backend that tests use to reach code paths real sizes reach only with
// large inputs. Plain C++ (no CUDA headers).
#include <cstdint>

namespace dgemma::cuda {

// Upper bound of attention's bf16 score buffer per call (default 256 MiB); queries are processed in
// chunks that fit. Returns the previous value.
int64_t set_attention_score_budget(int64_t bytes);

// Which attention calls run the fused kernel (fused_attention.cu) instead of the cuBLAS score /
// softmax / P.V path: none, the measured-faster cases (kAuto, the default: the bidirectional
// denoising passes at head dims up to 256), or every shape the kernel supports (tests, benchmarks).
// Returns the previous mode.
enum class FusedAttention { kOff, kAuto, kAll };
FusedAttention set_fused_attention(FusedAttention mode);

// Whether the MoE block groups tokens by expert on the device and runs the grouped expert kernel (no
// host synchronisation) instead of grouping on the host for cuBLAS. Returns the previous value.
bool set_moe_device_grouping(bool on);

}  // namespace dgemma::cuda
