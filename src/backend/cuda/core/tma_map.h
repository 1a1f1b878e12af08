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

 private:
  using Key = std::tuple<const void*, int64_t, int64_t, int>;
  std::mutex mu_;
  std::map<Key, CUtensorMap> maps_;
};

}  // namespace dgemma::cuda
