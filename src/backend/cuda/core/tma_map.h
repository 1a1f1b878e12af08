#pragma once
// TMA descriptors (CUtensorMap) of the kernels that copy with the tensor memory accelerator, encoded on
// the host through the driver's cuTensorMapEncodeTiled (reached through the runtime: no link to
// libcuda). A descriptor is a pure function of its arguments (address, shape, box, swizzle), so each
// one is encoded once per backend and then taken from its cache (TmaMaps, owned by the backend's
// Context, reached through its Stream: a weight's maps are asked for at every launch); the cache holds
// at most a few thousand descriptors and starts over when full.
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include <cuda.h>

namespace dgemma::cuda {

// A backend's encoded descriptors. Thread-safe.
class TmaMaps {
 public:
  // A row-major bf16 matrix [rows, cols] at `base` (16-byte aligned, cols a multiple of 8) read in
  // boxes of box_rows rows by 64 columns (128 bytes, the 128-byte swizzle of the wgmma operands;
  // elements past the matrix read as zeros). Throws std::runtime_error when the driver refuses the shape.
  CUtensorMap bf16_row_tile(const void* base, int64_t rows, int64_t cols, int box_rows);
  // A row-major matrix [rows, cols] of elem_bytes-byte elements (1: uint8, 4: uint32) at `base`
  // (16-byte aligned, rows 16-byte aligned) read in boxes of box_rows x box_cols elements laid out row
  // after row, unswizzled (box_cols * elem_bytes a multiple of 16; elements past the matrix read as
  // zeros). Throws std::runtime_error when the driver refuses the shape.
  CUtensorMap plain_tile(const void* base, int elem_bytes, int64_t rows, int64_t cols, int box_cols, int box_rows);

 private:
  // base, element bytes (2 with the swizzle: bf16_row_tile), rows, cols, box columns, box rows
  using Key = std::tuple<const void*, int, int64_t, int64_t, int, int>;
  CUtensorMap get(const Key& key);  // from the cache, encoded on a miss
  std::mutex mu_;
  std::map<Key, CUtensorMap> maps_;
};

}  // namespace dgemma::cuda
