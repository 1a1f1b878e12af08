// The fused attention prologue (layer/qkv_prologue.cuh): the launch of layer/qkv_prologue_kernel.cuh's
// kernels. Unfused, a layer runs three rmsnorm launches (q, k, v), two rope launches and, for K=V layers, a
// copy; each re-reads its rows and each rope launch recomputes the token's cos/sin. Here one launch
// reads each head row once and computes a token's bf16 cos/sin once.
#include <algorithm>

#include "backend/cuda/core/common.cuh"
#include "backend/cuda/layer/qkv_prologue.cuh"
#include "backend/cuda/layer/qkv_prologue_kernel.cuh"

namespace dgemma::cuda {
namespace {

constexpr int kMaxWarps = 16;  // the row kernel: 512 threads, two or three blocks per SM
constexpr int kMaxD = 512;
constexpr size_t kSmemLimit = 48 * 1024;

size_t row_kernel_smem(int64_t D, int warps) {
  return static_cast<size_t>(D) * 4 + static_cast<size_t>(warps) * D * 2;
}

}  // namespace

bool qkv_prologue_fusable(int64_t D, std::initializer_list<const void*> ptrs) {
  if (D <= 0 || D % 16 != 0 || D > kMaxD) return false;
  for (const void* p : ptrs)
    if ((reinterpret_cast<uintptr_t>(p) & 15u) != 0) return false;
  return true;
}

void launch_qkv_prologue(uint16_t* q, uint16_t* k, uint16_t* v, bool k_eq_v, const uint16_t* q_norm,
                         const uint16_t* k_norm, const int32_t* positions, const float* inv_freq, int64_t T,
                         int64_t Hq, int64_t Hkv, int64_t D, float eps, Stream stream, const uint16_t* qkv) {
  if (T <= 0) return;
  const int64_t rows = Hq + (k_eq_v ? 1 : 2) * Hkv;
  const int64_t words = D / 8;
  // Fused input: one row of `rows` head rows per token, q's heads, then k's, then v's.
  const uint4* fused = reinterpret_cast<const uint4*>(qkv);
  const int lanes = qkv_lanes(D);
  QkvLaunch a{reinterpret_cast<uint4*>(q),
              reinterpret_cast<uint4*>(k),
              reinterpret_cast<uint4*>(v),
              fused ? fused : reinterpret_cast<const uint4*>(q),
              fused ? fused + Hq * words : reinterpret_cast<const uint4*>(k),
              fused ? fused + (Hq + Hkv) * words : reinterpret_cast<const uint4*>(v),
              fused ? rows * words : Hq * words,
              fused ? rows * words : Hkv * words,
              fused ? rows * words : Hkv * words,
              reinterpret_cast<const uint4*>(q_norm),
              reinterpret_cast<const uint4*>(k_norm),
              positions,
              inv_freq,
              static_cast<int>(Hq),
              static_cast<int>(Hkv),
              static_cast<int>(D),
              k_eq_v,
              eps,
              T,
              lanes};
  // Every head row of a token in one block (at most kQkvMaxThreads threads: the 26B-A4B's sliding
  // layers 32 rows x 16, its full ones 18 x 32), the blocks looping over the tokens.
  const int64_t threads = ceil_div(rows * lanes, 32) * 32;
  if (threads <= kQkvMaxThreads) {
    const size_t smem = static_cast<size_t>(D) * 2 * 2 * sizeof(float);
    const int n = static_cast<int>(threads);
    launch_kernel(stream, qkv_prologue_kernel, resident_grid(stream, qkv_prologue_kernel, n, smem, T), n,
                  smem, a);
    return;
  }
  int warps = static_cast<int>(std::clamp<int64_t>(rows, 1, kMaxWarps));
  while (warps > 1 && row_kernel_smem(D, warps) > kSmemLimit) --warps;
  launch_kernel(stream, qkv_prologue_row_kernel, static_cast<unsigned>(T), warps * 32,
                row_kernel_smem(D, warps), a);
}

}  // namespace dgemma::cuda
