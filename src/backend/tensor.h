#pragma once
// Tensor: a typed view of contiguous memory on one device, optionally owning it.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

namespace dgemma {

// kF8E4M3: FP8 E4M3 (fn: no infinities) codes, one byte each (weights and block scales of
// quantised checkpoints); packed NVFP4 (E2M1) weights are kU8 bytes, two values each.
enum class ScalarType { kF32, kBF16, kI32, kU8, kF8E4M3 };
enum class Device { kCpu, kCuda };

size_t scalar_size(ScalarType t);
const char* scalar_name(ScalarType t);

struct Tensor {
  static constexpr int kMaxDims = 4;
  ScalarType type = ScalarType::kF32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};
  void* data = nullptr;
  std::shared_ptr<void> owner;  // keeps the storage alive (null for borrowed views)

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  size_t nbytes() const { return static_cast<size_t>(numel()) * scalar_size(type); }
  int64_t dim(int i) const { return shape[i < 0 ? ndim + i : i]; }
  bool empty() const { return data == nullptr; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  // A view with another shape over the same storage (same numel).
  Tensor reshape(std::initializer_list<int64_t> dims) const;
  // Rows [begin, end) of the first dimension.
  Tensor rows(int64_t begin, int64_t end) const;
  std::string shape_str() const;
};

// Host tensors (owning).
Tensor host_tensor(ScalarType type, std::initializer_list<int64_t> dims);
Tensor borrow_tensor(void* data, ScalarType type, std::initializer_list<int64_t> dims, Device device = Device::kCpu);

}  // namespace dgemma
