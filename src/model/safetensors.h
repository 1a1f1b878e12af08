#pragma once
// Hardened reader (and a small writer) for the safetensors format:
//   [u64 LE header length N][N bytes of JSON header][data section]
// The header maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to
// the start of the data section) plus an optional "__metadata__" object of strings.
// Every file is untrusted: each malformed input ends in dgemma::Error(kInvalidFile) naming the file
// (and the tensor), never a crash or an out-of-bounds read. Tensor data stays in the memory map.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/mmap_file.h"

namespace dgemma {

enum class DType { kBF16, kF16, kF32, kF8E4M3, kU8, kI8, kI32, kI64 };

size_t dtype_size(DType t);                            // bytes per element
const char* dtype_name(DType t);                       // safetensors spelling: "BF16", "F8_E4M3", ...
std::optional<DType> parse_dtype(std::string_view s);  // exact safetensors spelling; nullopt if unknown

// Limits enforced on every header (the reference Rust implementation caps the header at 100 MB).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;
constexpr size_t kMaxTensorNameBytes = 1024;
constexpr size_t kMaxTensorDims = 8;
constexpr int64_t kMaxTensorDim = int64_t{1} << 62;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  // Points into the mmap. Only as aligned as the file makes it (HF writers pad the header to 8 bytes,
  // so offsets that are multiples of the element size give aligned data); copy with memcpy if unsure.
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // path of the file holding it
  int64_t numel() const;
};

// One .safetensors file, memory-mapped and fully validated in the constructor.
class SafetensorsFile {
 public:
  // Throws Error(kNotFound) when the file does not exist, Error(kInvalidFile) when it is malformed.
  explicit SafetensorsFile(const std::string& path);

  // All tensors, in data-offset (file) order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  // The header's "__metadata__" object (string values only); empty when the file has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return map_.path(); }
  size_t file_size() const { return map_.size(); }

 private:
  MappedFile map_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;  // name -> index into tensors_
  std::map<std::string, std::string> metadata_;
};

// A checkpoint: a directory holding model.safetensors.index.json + shards, or model.safetensors, or
// (fallback) any *.safetensors files; or the path of a single .safetensors file or of an *.index.json.
// With an index, every shard must exist and hold exactly the tensors the index maps to it.
class SafetensorsCheckpoint {
 public:
  // Throws Error(kNotFound) when the path, a listed shard or any weights file is missing,
  // Error(kInvalidFile) when a file, the index, or their agreement is broken.
  explicit SafetensorsCheckpoint(const std::string& path);

  const TensorInfo* find(std::string_view name) const;  // nullptr if absent
  std::vector<const TensorInfo*> tensors() const;       // all tensors, sorted by name
  size_t total_bytes() const;                           // sum of nbytes over all tensors
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  void load_index(const std::string& dir, const std::string& index_path);
  void add_file(std::unique_ptr<SafetensorsFile> f);
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*, std::less<>> by_name_;
};

// Writer (tests, dummy fixtures): tensors are written in the given order, the header is padded with
// spaces so the data section starts 8-byte aligned. Throws Error(kInvalidArgument) on inconsistent
// input (byte count not matching shape x dtype, bad or duplicate names) and Error(kInvalidFile) when the
// file cannot be written.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace dgemma
