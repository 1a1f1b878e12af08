// make_cuda_backend() and the NCCL group when the CUDA backend is not compiled in (no nvcc at build time).
#include "backend/backend.h"
#include "backend/device_collective.h"
#include "backend/device_memory.h"
#include "backend/nccl.h"
#include "util/error.h"

#ifndef DGEMMA_HAVE_CUDA
namespace dgemma {

std::unique_ptr<Backend> make_cuda_backend(int, const CudaOptions&) {
  fail(ErrorKind::kUnsupported, "this dgemma was built without CUDA (nvcc was not found at build time); use --device cpu");
}
bool cuda_available() { return false; }
int cuda_device_count() {
  return 0;
}
std::optional<uint64_t> cuda_device_memory() {
  return std::nullopt;
}

bool nccl_available(std::string* why, const std::string&) {
  if (why) *why = "this dgemma was built without CUDA";
  return false;
}
std::unique_ptr<CollectiveGroup> make_nccl_group(const std::vector<Backend*>&, const std::string&, double) {
  fail(ErrorKind::kUnsupported, "NCCL: this dgemma was built without CUDA");
}
std::unique_ptr<CollectiveGroup> make_device_group(const std::vector<Backend*>&, double) {
  fail(ErrorKind::kUnsupported, "the one-device collective: this dgemma was built without CUDA");
}

}  // namespace dgemma
#endif
