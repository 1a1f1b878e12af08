// The model shapes the CUDA backend takes (backend/cuda_limits.h), checked when the engine loads a
// model for CUDA: the released 26B-A4B passes; each limit a valid config can break is refused with the
// config's value, the limit and --device cpu named. No GPU needed.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda_limits.h"
#include "util/error.h"

namespace dgemma {
namespace {

CudaModelShape released_26b() {
  CudaModelShape s;
  s.hidden_size = 2816;
  s.head_dims = {256, 512};
  s.vocab_size = 262144;
  s.num_experts = 128;
  s.top_k = 8;
  s.moe_intermediate_size = 704;
  return s;
}

void expect_refused(const CudaModelShape& s, const std::string& value, const std::string& limit) {
  const std::string why = cuda_unsupported_reason(s);
  EXPECT_NE(why.find(value), std::string::npos) << why;
  EXPECT_NE(why.find(limit), std::string::npos) << why;
  try {
    check_cuda_supports(s);
    ADD_FAILURE() << "not refused: " << value;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("--device cpu"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(value), std::string::npos) << e.what();
  }
}

TEST(CudaLimits, TheReleasedModelPasses) {
  EXPECT_EQ(cuda_unsupported_reason(released_26b()), "");
  CudaModelShape q = released_26b();
  q.quantized = true;  // 2816 and 704 are multiples of 64
  EXPECT_EQ(cuda_unsupported_reason(q), "");
  EXPECT_NO_THROW(check_cuda_supports(q));
  CudaModelShape dense = released_26b();  // no MoE block: its limits do not apply
  dense.num_experts = 0;
  dense.moe_intermediate_size = 0;
  dense.hidden_size = 2820;
  EXPECT_EQ(cuda_unsupported_reason(dense), "");
}

TEST(CudaLimits, HeadDims) {
  CudaModelShape s = released_26b();
  s.head_dims = {256, 20};
  expect_refused(s, "head_dim 20", "multiples of 8");
  s.head_dims = {12288};
  expect_refused(s, "head_dim 12288", "up to 8192");
  s.head_dims = {64, 96, 128};  // multiples of 8 off the flash kernels: the per-item path takes them
  EXPECT_EQ(cuda_unsupported_reason(s), "");
}

TEST(CudaLimits, MoeShapes) {
  CudaModelShape s = released_26b();
  s.moe_intermediate_size = 30;
  expect_refused(s, "moe_intermediate_size 30", "multiples of 8");
  s = released_26b();
  s.hidden_size = 2820;
  expect_refused(s, "hidden_size 2820", "multiples of 8");
  s = released_26b();
  s.num_experts = 300;
  expect_refused(s, "num_experts 300", "at most 256");
  s = released_26b();
  s.top_k = 33;
  expect_refused(s, "top_k_experts 33", "1 to 32");
  s = released_26b();
  s.num_experts = 4;
  s.top_k = 8;
  expect_refused(s, "top_k_experts 8", "at most num_experts");
  s = released_26b();
  s.quantized = true;
  s.moe_intermediate_size = 712;  // a multiple of 8, not of 64
  expect_refused(s, "moe_intermediate_size 712", "quantised experts");
  s = released_26b();
  s.hidden_size = 1 << 21;
  expect_refused(s, "hidden_size 2097152", "at most 1048576");
  s = released_26b();
  s.hidden_size = 65536;
  s.moe_intermediate_size = 32768;
  expect_refused(s, "65536 x 65536", "fewer than 2147483648");
}

TEST(CudaLimits, Vocabulary) {
  CudaModelShape s = released_26b();
  s.vocab_size = int64_t{1} << 31;
  expect_refused(s, "vocab_size 2147483648", "2147483647");
}

}  // namespace
}  // namespace dgemma
