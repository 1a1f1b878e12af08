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

// The map of a TmaMaps key: bf16 boxes with the 128-byte swizzle (elem_bytes 2), else plain uint8 / uint32 boxes.
CUtensorMap encode(const void* base, int elem_bytes, int64_t rows, int64_t cols, int box_cols, int box_rows) {
  CUtensorMap map{};
  const bool swizzled = elem_bytes == 2;
  const CUtensorMapDataType type = swizzled          ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                   : elem_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32
                                                     : CU_TENSOR_MAP_DATA_TYPE_UINT8;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * elem_bytes};  // bytes between rows
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode_tiled()(&map, type, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    swizzled ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("cuTensorMapEncodeTiled refused a [" + std::to_string(rows) + ", " +
                             std::to_string(cols) + "] map of " + std::to_string(elem_bytes) +
                             "-byte elements with boxes of " + std::to_string(box_rows) + " x " +
                             std::to_string(box_cols) + " (CUresult " + std::to_string(static_cast<int>(r)) + ")");
  return map;
}

}  // namespace

CUtensorMap TmaMaps::get(const Key& key) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = maps_.find(key);
  if (it != maps_.end()) return it->second;
  if (maps_.size() >= kMaxCachedMaps) maps_.clear();
  const auto& [base, elem_bytes, rows, cols, box_cols, box_rows] = key;
  return maps_.emplace(key, encode(base, elem_bytes, rows, cols, box_cols, box_rows)).first->second;
}

CUtensorMap TmaMaps::bf16_row_tile(const void* base, int64_t rows, int64_t cols, int box_rows) {
  return get({base, 2, rows, cols, 64, box_rows});
}

CUtensorMap TmaMaps::plain_tile(const void* base, int elem_bytes, int64_t rows, int64_t cols, int box_cols,
                                int box_rows) {
  if (elem_bytes != 1 && elem_bytes != 4) throw std::runtime_error("plain_tile: elements of 1 or 4 bytes");
  return get({base, elem_bytes, rows, cols, box_cols, box_rows});
}

}  // namespace dgemma::cuda
