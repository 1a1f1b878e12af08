// Launchers of the W4A16 / W8A16 kernel (the kernel and its launch plans: quant/weight_only_kernel.cuh)
// and their shape rules.
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/core/ptx.cuh"
#include "backend/cuda/quant/ptx.cuh"
#include "backend/cuda/quant/weight_only.cuh"
#include "backend/cuda/quant/weight_only_kernel.cuh"

namespace dgemma::cuda {
namespace {

struct DeviceLauncher {
  Stream stream;
  bool programmatic = false;  // core/launch.cuh: the down GEMM right after its gate_up
  template <int MF, int W, int S, int U, bool kGateUp, bool kFp8>
  void go(const Fp4Args& g, int64_t grid_x, int64_t grid_y) {
    auto* kernel = grouped_fp4_kernel<MF, W, S, U, kGateUp, kFp8>;
    constexpr int smem = smem_bytes<MF, W, S, U, kFp8>();
    if (smem >= 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    launch_kernel_ex(stream, programmatic, kernel, dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)),
                     32 * W, smem, g);
  }
};

}  // namespace

void launch_dense_quant(bool fp8, const uint16_t* x, const uint8_t* w, const uint8_t* block, const float* row_scale,
                        int64_t T, int64_t N, int64_t K, uint16_t* out, QuantTile tile, Stream stream) {
  DeviceLauncher l{stream};
  run_dense(l, fp8, x, w, block, row_scale, T, N, K, out, tile);
}

bool grouped_fp4_supported(int64_t rows, int64_t Kd, const void* packed, const void* block) {
  const auto p = reinterpret_cast<uintptr_t>(packed), b = reinterpret_cast<uintptr_t>(block);
  return rows >= 8 && rows % 8 == 0 && Kd >= kBK && Kd % kBK == 0 && rows * Kd < (int64_t{1} << 31) && p % 16 == 0 &&
         b % 16 == 0;
}

bool grouped_fp8_supported(int64_t rows, int64_t Kd, const void* weights) {
  return rows >= 8 && rows % 8 == 0 && Kd >= kBK && Kd % kBK == 0 && rows * Kd < (int64_t{1} << 31) &&
         reinterpret_cast<uintptr_t>(weights) % 16 == 0;
}

void launch_grouped_gate_up_fp4(const uint16_t* x, const uint8_t* packed, const uint8_t* block, const float* row_scale,
                                const int32_t* offsets, const int32_t* pairs, int64_t R, int64_t E, int64_t K,
                                int64_t H, int64_t I, uint16_t* act, QuantTile tile, Stream stream) {
  DeviceLauncher l{stream};
  run_gate_up(l, false, x, packed, block, row_scale, offsets, pairs, R, E, K, H, I, act, tile);
}

void launch_grouped_down_fp4(const uint16_t* act, const uint8_t* packed, const uint8_t* block, const float* row_scale,
                             const int32_t* offsets, const int32_t* pairs, const float* top_w, int64_t R, int64_t E,
                             int64_t H, int64_t I, uint16_t* y, QuantTile tile, bool after_gate_up, Stream stream) {
  DeviceLauncher l{stream, after_gate_up};
  run_down(l, false, act, packed, block, row_scale, offsets, pairs, top_w, R, E, H, I, y, tile);
}

void launch_grouped_gate_up_fp8(const uint16_t* x, const uint8_t* w, const float* row_scale, const int32_t* offsets,
                                const int32_t* pairs, int64_t R, int64_t E, int64_t K, int64_t H, int64_t I,
                                uint16_t* act, QuantTile tile, Stream stream) {
  DeviceLauncher l{stream};
  run_gate_up(l, true, x, w, nullptr, row_scale, offsets, pairs, R, E, K, H, I, act, tile);
}

void launch_grouped_down_fp8(const uint16_t* act, const uint8_t* w, const float* row_scale, const int32_t* offsets,
                             const int32_t* pairs, const float* top_w, int64_t R, int64_t E, int64_t H, int64_t I,
                             uint16_t* y, QuantTile tile, bool after_gate_up, Stream stream) {
  DeviceLauncher l{stream, after_gate_up};
  run_down(l, true, act, w, nullptr, row_scale, offsets, pairs, top_w, R, E, H, I, y, tile);
}

}  // namespace dgemma::cuda
