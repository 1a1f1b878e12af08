#include "backend/cuda/core/tma_map.h"

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace dgemma::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
    if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr)
      throw std::runtime_error("the CUDA driver has no cuTensorMapEncodeTiled (TMA needs CUDA 12 and sm_90)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

constexpr size_t kMaxCachedMaps = 4096;

// A bf16 map: base, rows, cols, box rows (boxes of 64 columns, 128-byte swizzle).
CUtensorMap encode(const void* base, int64_t rows, int64_t cols, int box_rows) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};  // bytes between rows
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                     element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled refused a [" + std::to_string(rows) + ", " +
                             std::to_string(cols) + "] bf16 map with boxes of " + std::to_string(box_rows) +
                             " rows (CUresult " + std::to_string(static_cast<int>(r)) + ")");
  return map;
}

}  // namespace

CUtensorMap TmaMaps::bf16_row_tile(const void* base, int64_t rows, int64_t cols, int box_rows) {
  const Key key{base, rows, cols, box_rows};
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = maps_.find(key);
  if (it != maps_.end()) return it->second;
  if (maps_.size() >= kMaxCachedMaps) maps_.clear();
  return maps_.emplace(key, encode(base, rows, cols, box_rows)).first->second;
}

}  // namespace dgemma::cuda
