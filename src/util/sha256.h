#pragma once
// SHA-256 (FIPS 180-4). Used to store API keys as digests and compare them in constant time, and
// anywhere else a content hash is needed. Small and dependency-free on purpose.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dgemma {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Sha256Digest finish();  // the object must not be updated afterwards

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(std::string_view data);
std::string sha256_hex(std::string_view data);
std::string to_hex(const Sha256Digest& digest);

// Compares two digests without an early exit, so timing does not reveal the matching prefix.
bool digests_equal(const Sha256Digest& a, const Sha256Digest& b);

}  // namespace dgemma
