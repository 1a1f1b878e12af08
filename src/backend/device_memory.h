#pragma once
// How much memory the GPU has, for plans made before any backend exists (dgemma inspect).
#include <cstdint>
#include <optional>

namespace dgemma {

// Total memory of CUDA device 0 in bytes; nullopt when no GPU is visible (or CUDA is not built in).
std::optional<uint64_t> cuda_device_memory();

}  // namespace dgemma
