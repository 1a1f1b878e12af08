#pragma once
// Minimal .npy (NumPy format v1/v2) reader and writer: little-endian f4 / i4 / u1 / i8 / f8 / bf16 as
// u2, C order. Used for golden fixtures and `dgemma generate --dump`.
#include <cstdint>
#include <string>
#include <vector>

namespace dgemma {

struct NpyArray {
  std::string dtype;             // numpy descr without byte order: "f4", "i4", "u1", "i8", "f8", "u2"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  int64_t numel() const;
  std::vector<float> as_float() const;     // converts f4/f8/i4/i8/u1
  std::vector<int64_t> as_int() const;     // converts i4/i8/u1
};

NpyArray read_npy(const std::string& path);  // throws Error(kInvalidFile / kNotFound)
void write_npy(const std::string& path, const std::string& dtype, const std::vector<int64_t>& shape, const void* data,
               size_t nbytes);

}  // namespace dgemma
