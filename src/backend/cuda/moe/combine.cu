// The launch of the MoE combine (moe/combine_kernel.cuh: 16-byte words, one word a thread, all K rows'
// words loaded before the in-order bf16 adds).
#include "backend/cuda/core/common.cuh"
#include "backend/cuda/moe/combine.cuh"
#include "backend/cuda/moe/combine_kernel.cuh"
#include "backend/cuda_limits.h"
#include "util/error.h"

namespace dgemma::cuda {

static_assert(kCombineMaxK >= cuda_limits::kMaxTopK);  // every top-k the engine loads (cuda_limits.h)

void launch_moe_combine(const uint16_t* y, const int32_t* order, int64_t T, int64_t K, int64_t H,
                        uint16_t* out, Stream stream) {
  DG_CHECK(K >= 1 && K <= kCombineMaxK && vec8_ok(H, y, out));
  if (T <= 0 || H <= 0) return;
  const int64_t chunks = ceil_div(H / 8, kCombineThreads);
  launch_kernel(stream, combine_vec_kernel, static_cast<unsigned>(T * chunks), kCombineThreads, 0,
                reinterpret_cast<const uint4*>(y), order, static_cast<int>(K), H / 8, chunks,
                reinterpret_cast<uint4*>(out));
}

}  // namespace dgemma::cuda
