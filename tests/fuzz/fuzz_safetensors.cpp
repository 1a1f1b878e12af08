// libFuzzer target for the safetensors reader: the input bytes are a whole .safetensors file.
// Any dgemma::Error is an expected rejection; any other exception, a crash, or a sanitizer report is a
// bug. Accepted files have every tensor's bytes touched so ASan sees reads past the mapping.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "model/safetensors.h"
#include "util/error.h"

namespace {

volatile unsigned g_sink;  // keeps the tensor reads from being optimised away

const std::string& scratch_path() {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("dgemma_fuzz_safetensors_" + std::to_string(::getpid())))
          .string();
  return path;
}

bool write_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratch_path();
  if (!write_file(path, data, size)) {
    std::perror("fuzz_safetensors: cannot write scratch file");
    std::abort();
  }
  try {
    dgemma::SafetensorsFile file(path);
    unsigned sum = 0;
    size_t total = 0;
    for (const auto& t : file.tensors()) {
      if (file.find(t.name) != &t) std::abort();  // lookup must agree with the list
      if (t.nbytes != static_cast<size_t>(t.numel()) * dgemma::dtype_size(t.dtype)) std::abort();
      if (t.nbytes > 0) sum += t.data[0] + t.data[t.nbytes - 1];
      total += t.nbytes;
    }
    if (total > file.file_size()) std::abort();  // non-overlapping tensors fit in the file
    for (const auto& [k, v] : file.metadata()) sum += static_cast<unsigned>(k.size() + v.size());
    g_sink = sum;
  } catch (const dgemma::Error&) {
    // Rejected cleanly.
  }
  std::remove(path.c_str());
  return 0;
}
