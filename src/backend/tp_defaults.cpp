// Defaults of the tensor-parallel ops of Backend: backends without them refuse tensor parallelism.
#include "backend/backend.h"
#include "util/error.h"

namespace dgemma {
namespace {
[[noreturn]] void no_tp(const Backend& b, const char* op) {
  fail(ErrorKind::kUnsupported, "tensor parallelism: the {} backend has no {} op yet", b.name(), op);
}
}  // namespace

void Backend::embed_shard(const Tensor&, const Tensor&, int64_t, int64_t, float, const Tensor&) { no_tp(*this, "embed_shard"); }
void Backend::matmul_kn_blocks(const Tensor&, const Tensor&, int, const Tensor&) { no_tp(*this, "matmul_kn_blocks"); }
void Backend::sum_blocks(const Tensor&, const Tensor&) { no_tp(*this, "sum_blocks"); }

}  // namespace dgemma
