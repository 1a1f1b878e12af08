// make_cuda_backend() when the CUDA backend is not compiled in (no nvcc at build time).
#include "backend/backend.h"
#include "util/error.h"

#ifndef DGEMMA_HAVE_CUDA
namespace dgemma {

std::unique_ptr<Backend> make_cuda_backend(int) {
  fail(ErrorKind::kUnsupported, "this dgemma was built without CUDA (nvcc was not found at build time); use --device cpu");
}
bool cuda_available() { return false; }

}  // namespace dgemma
#endif
