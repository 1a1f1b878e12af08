#pragma once
// The CUDA backend's kernel choices, given to make_cuda_backend (backend.h) and fixed for the backend's
// life. Plain C++ (no CUDA headers): the engine's configuration and the command line carry them in
// builds without CUDA too. Every field defaults to the automatic choice; `dgemma serve` exposes the
// kernel family and the FP8 experts' path, the rest are options of the benchmarks and the GPU checks
// (a forced kernel runs at every size, so that tests check each kernel on small problems).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dgemma {

// Which GPU generation's kernels run. kHopper: the sm_90a kernels (warpgroup MMA, TMA) where a planner
// has one — flash attention of head dims 256 / 512, the bf16 grouped experts past ~24 rows an expert,
// the W8A8 FP8 experts — and refused on a GPU that is not sm_90. kPortable: the mma.sync (sm_80)
// kernels that Ampere, Ada and Blackwell GPUs run. kAuto: kHopper on an sm_90 GPU, else kPortable.
enum class KernelFamily { kAuto, kHopper, kPortable };

// attention_batch: kAuto the one-launch flash kernel for head dims 64 / 128 / 256 / 512 and cuBLAS per
// item for the others; kPerItem cuBLAS per item for every head dim.
enum class AttentionKernel { kAuto, kPerItem };

// The bf16 grouped expert GEMM (both projections): kAuto by the mean rows per expert (the family's
// kernels), or one kernel at every size. kWgmma64x128 and kTma128x256 are hopper-family kernels.
// W8A8 FP8 experts read it too: kSmallRows their few-rows kernel, any other kernel their 64 x 128
// wgmma tiles (quant/w8a8_experts.cuh).
enum class MoeKernel { kAuto, kSmallRows, kMmaSync128x128, kWgmma64x128, kTma128x256 };

// The tile of the W4A16 / W8A16 kernel (NVFP4 and FP8 weights kept quantised): rows x columns a CTA,
// and K values a cp.async stage (kRows32Cols128K256: 256; the others 64). kAuto by the rows (per
// expert, or of a dense matmul).
enum class QuantTile { kAuto, kRows32Cols64, kRows32Cols128K256, kRows128Cols64 };

// How the dense (2-D) quantised linears are served (the experts stay quantised either way):
//   kW8A8:   FP8 linears whose checkpoint prescribes dynamic per-token FP8 activations run as it says
//            (the activations quantised per token, cuBLASLt's FP8 GEMM); every other quantised
//            linear, and a shape cuBLASLt refuses, as kKernel;
//   kKernel: the W4A16 / W8A16 kernel on repacked weights, bf16 activations;
//   kBf16:   exact dequantisation to bf16 copies for cuBLAS (bf16's memory for those weights).
enum class DenseQuant { kW8A8, kKernel, kBf16 };

// FP8-dynamic expert stacks: kW8A8 the checkpoint's maths on FP8 tensor cores (activations quantised
// per row; hopper-family kernels), kW8A16 the W8A16 kernel with bf16 activations (the activations
// stay unquantised, so results differ from the checkpoint's maths). kAuto: kW8A8 in the hopper family,
// else kW8A16.
enum class Fp8Experts { kAuto, kW8A8, kW8A16 };

struct CudaOptions {
  KernelFamily family = KernelFamily::kAuto;
  AttentionKernel attention = AttentionKernel::kAuto;
  MoeKernel moe = MoeKernel::kAuto;
  QuantTile quant_experts = QuantTile::kAuto;  // both projections of NVFP4 / W8A16 FP8 experts
  QuantTile quant_dense = QuantTile::kAuto;    // dense matmuls on the W4A16 / W8A16 kernel
  DenseQuant dense_quant = DenseQuant::kW8A8;  // read when a weight is uploaded
  Fp8Experts fp8_experts = Fp8Experts::kAuto;  // read when a weight is uploaded
  // For tests: the key splits of every flash attention launch (0: planned; else 1 .. 32), and the
  // bytes of the per-item path's score buffer (queries are processed in chunks that fit it).
  int flash_splits = 0;
  int64_t attention_score_budget = int64_t{256} << 20;
  // For tests: every allocation filled with 0xFF bytes (NaN in bf16 and f32) in stream order before its
  // first use, so that an op reading memory nothing wrote gives NaN instead of an answer that depends on
  // what the memory last held (dgemma_gpu_check --poison-allocations).
  bool poison_allocations = false;
};

// The options as a backend on a GPU of compute capability major.minor runs them: the family kHopper
// (sm_90) or kPortable, the FP8 experts' path kW8A8 (hopper) or kW8A16. Throws Error(kUnsupported),
// naming the GPU, for what it cannot run: the hopper family, a hopper-family MoE kernel or W8A8 experts
// off sm_90, or a portable family asked for them. Throws Error(kInvalidArgument) for flash splits or a
// score budget out of range. Plain C++: tested without a GPU.
CudaOptions resolve_cuda_options(const CudaOptions& options, int major, int minor,
                                 const std::string& gpu_name);
// One line naming the family and the kernels resolved options choose (the start-up log).
std::string describe_cuda_kernels(const CudaOptions& resolved);

// The words of the command lines (serve, dgemma_bench, dgemma_gpu_check) for each choice, and back:
// parse_* returns false for any other word. E.g. kernel_family_word(KernelFamily::kPortable) is
// "portable"; kernel_family_words() "auto, hopper or portable" (for messages).
bool parse_kernel_family(std::string_view word, KernelFamily* out);
bool parse_attention_kernel(std::string_view word, AttentionKernel* out);
bool parse_moe_kernel(std::string_view word, MoeKernel* out);
bool parse_quant_tile(std::string_view word, QuantTile* out);
bool parse_dense_quant(std::string_view word, DenseQuant* out);
bool parse_fp8_experts(std::string_view word, Fp8Experts* out);
const char* kernel_family_word(KernelFamily v);
const char* attention_kernel_word(AttentionKernel v);
const char* moe_kernel_word(MoeKernel v);
const char* quant_tile_word(QuantTile v);
const char* dense_quant_word(DenseQuant v);
const char* fp8_experts_word(Fp8Experts v);
std::string kernel_family_words();
std::string attention_kernel_words();
std::string moe_kernel_words();
std::string quant_tile_words();
std::string dense_quant_words();
std::string fp8_experts_words();
// Every QuantTile but kAuto, in the order of their words (the checks and benchmarks run each).
std::vector<QuantTile> quant_tiles();

}  // namespace dgemma
