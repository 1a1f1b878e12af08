#include "backend/tensor.h"

#include <cstdlib>
#include <cstring>

#include "util/error.h"

namespace dgemma {

size_t scalar_size(ScalarType t) {
  switch (t) {
    case ScalarType::kF32: return 4;
    case ScalarType::kBF16: return 2;
    case ScalarType::kI32: return 4;
    case ScalarType::kU8: return 1;
    case ScalarType::kF8E4M3: return 1;
  }
  return 0;
}

const char* scalar_name(ScalarType t) {
  switch (t) {
    case ScalarType::kF32: return "f32";
    case ScalarType::kBF16: return "bf16";
    case ScalarType::kI32: return "i32";
    case ScalarType::kU8: return "u8";
    case ScalarType::kF8E4M3: return "f8e4m3";
  }
  return "?";
}

static void set_shape(Tensor& t, std::initializer_list<int64_t> dims) {
  DG_CHECK(dims.size() <= static_cast<size_t>(Tensor::kMaxDims));
  t.ndim = static_cast<int>(dims.size());
  int i = 0;
  for (int64_t d : dims) {
    DG_CHECK(d >= 0);
    t.shape[i++] = d;
  }
}

Tensor Tensor::reshape(std::initializer_list<int64_t> dims) const {
  Tensor t = *this;
  set_shape(t, dims);
  DG_CHECK(t.numel() == numel());
  return t;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  DG_CHECK(ndim >= 1 && begin >= 0 && begin <= end && end <= shape[0]);
  Tensor t = *this;
  const size_t row_bytes = shape[0] == 0 ? 0 : nbytes() / static_cast<size_t>(shape[0]);
  t.data = static_cast<uint8_t*>(data) + row_bytes * static_cast<size_t>(begin);
  t.shape[0] = end - begin;
  return t;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

Tensor host_tensor(ScalarType type, std::initializer_list<int64_t> dims) {
  Tensor t;
  t.type = type;
  set_shape(t, dims);
  const size_t bytes = std::max<size_t>(t.nbytes(), 1);
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) throw Error(ErrorKind::kResourceExhausted, fmt::format("out of host memory allocating {} bytes", bytes));
  std::memset(p, 0, bytes);
  t.owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data = p;
  return t;
}

Tensor borrow_tensor(void* data, ScalarType type, std::initializer_list<int64_t> dims, Device device) {
  Tensor t;
  t.type = type;
  t.device = device;
  set_shape(t, dims);
  t.data = data;
  return t;
}

}  // namespace dgemma
