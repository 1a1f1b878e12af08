#pragma once
// Read-only memory map of a whole file (RAII).
#include <cstddef>
#include <cstdint>
#include <string>

namespace dgemma {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws Error(kNotFound / kInvalidFile)
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) text file; throws Error naming the path when it cannot.
std::string read_text_file(const std::string& path, size_t max_bytes = 64u << 20);

}  // namespace dgemma
