// The CUDA backend's kernel choices as plain data (backend/cuda_options.h): the command-line words of
// every choice both ways, and the resolution against a GPU's compute capability (the family auto, the
// FP8 experts' path, and the refusals of what the GPU or the family cannot run). No GPU needed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda_options.h"
#include "util/error.h"

namespace dgemma {
namespace {

template <class E>
void round_trip(bool (*parse)(std::string_view, E*), const char* (*word)(E), std::string (*words)(),
                std::initializer_list<E> values) {
  for (const E v : values) {
    E back{};
    ASSERT_TRUE(parse(word(v), &back)) << word(v);
    EXPECT_EQ(back, v) << word(v);
    EXPECT_NE(words().find(word(v)), std::string::npos) << words();
  }
  E untouched = *values.begin();
  EXPECT_FALSE(parse("no-such-word", &untouched));
  EXPECT_FALSE(parse("", &untouched));
}

TEST(CudaOptions, WordsRoundTrip) {
  round_trip(parse_kernel_family, kernel_family_word, kernel_family_words,
             {KernelFamily::kAuto, KernelFamily::kHopper, KernelFamily::kPortable});
  round_trip(parse_attention_kernel, attention_kernel_word, attention_kernel_words,
             {AttentionKernel::kAuto, AttentionKernel::kPerItem});
  round_trip(parse_moe_kernel, moe_kernel_word, moe_kernel_words,
             {MoeKernel::kAuto, MoeKernel::kSmallRows, MoeKernel::kMmaSync128x128, MoeKernel::kWgmma64x128,
              MoeKernel::kTma128x256});
  round_trip(parse_quant_tile, quant_tile_word, quant_tile_words,
             {QuantTile::kAuto, QuantTile::kRows32Cols64, QuantTile::kRows32Cols128K256, QuantTile::kRows128Cols64});
  EXPECT_EQ(quant_tiles(), (std::vector<QuantTile>{QuantTile::kRows32Cols64, QuantTile::kRows32Cols128K256,
                                                   QuantTile::kRows128Cols64}));
  round_trip(parse_dense_quant, dense_quant_word, dense_quant_words,
             {DenseQuant::kW8A8, DenseQuant::kKernel, DenseQuant::kBf16});
  round_trip(parse_fp8_experts, fp8_experts_word, fp8_experts_words,
             {Fp8Experts::kAuto, Fp8Experts::kW8A8, Fp8Experts::kW8A16});
  EXPECT_EQ(kernel_family_words(), "auto, hopper or portable");
}

TEST(CudaOptions, AutoResolvesByTheGpu) {
  const CudaOptions h100 = resolve_cuda_options({}, 9, 0, "NVIDIA H100");
  EXPECT_EQ(h100.family, KernelFamily::kHopper);
  EXPECT_EQ(h100.fp8_experts, Fp8Experts::kW8A8);
  for (const auto& [major, minor] : {std::pair{8, 0}, std::pair{8, 9}, std::pair{10, 0}, std::pair{12, 1}}) {
    const CudaOptions r = resolve_cuda_options({}, major, minor, "a GPU");
    EXPECT_EQ(r.family, KernelFamily::kPortable) << major << minor;
    EXPECT_EQ(r.fp8_experts, Fp8Experts::kW8A16) << major << minor;
  }
  // Portable on an H100: the sm_80 kernels, W8A16 experts; the choices given stay as given.
  CudaOptions o;
  o.family = KernelFamily::kPortable;
  o.moe = MoeKernel::kSmallRows;
  o.quant_dense = QuantTile::kRows128Cols64;
  o.fp8_experts = Fp8Experts::kW8A16;
  const CudaOptions p = resolve_cuda_options(o, 9, 0, "NVIDIA H100");
  EXPECT_EQ(p.family, KernelFamily::kPortable);
  EXPECT_EQ(p.fp8_experts, Fp8Experts::kW8A16);
  EXPECT_EQ(p.moe, MoeKernel::kSmallRows);
  EXPECT_EQ(p.quant_dense, QuantTile::kRows128Cols64);
  // W8A16 experts asked for on a hopper GPU stay W8A16 (the latency side of the trade).
  CudaOptions w;
  w.fp8_experts = Fp8Experts::kW8A16;
  EXPECT_EQ(resolve_cuda_options(w, 9, 0, "H200").fp8_experts, Fp8Experts::kW8A16);
  // The test options pass through as given.
  CudaOptions t;
  t.poison_allocations = true;
  EXPECT_TRUE(resolve_cuda_options(t, 9, 0, "H200").poison_allocations);
  EXPECT_FALSE(resolve_cuda_options({}, 8, 9, "L40S").poison_allocations);
}

// What cannot run is refused with the GPU named and the way out, never quietly replaced.
TEST(CudaOptions, RefusesWhatTheGpuOrFamilyCannotRun) {
  auto refused = [](const CudaOptions& o, int major, const std::string& want) {
    try {
      resolve_cuda_options(o, major, 0, "Some GPU");
      ADD_FAILURE() << "accepted; expected: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  CudaOptions hopper;
  hopper.family = KernelFamily::kHopper;
  refused(hopper, 8, "sm_90");
  refused(hopper, 10, "Some GPU (sm_100)");
  CudaOptions wgmma;
  wgmma.moe = MoeKernel::kWgmma64x128;
  refused(wgmma, 8, "hopper-family kernel");
  wgmma.family = KernelFamily::kPortable;
  refused(wgmma, 9, "hopper-family kernel");
  CudaOptions w8a8;
  w8a8.fp8_experts = Fp8Experts::kW8A8;
  refused(w8a8, 8, "--fp8-moe w8a8");
  CudaOptions splits;
  splits.flash_splits = 33;
  refused(splits, 9, "key splits");
  CudaOptions budget;
  budget.attention_score_budget = 0;
  refused(budget, 9, "score budget");
}

TEST(CudaOptions, DescribesTheKernelsChosen) {
  const std::string h = describe_cuda_kernels(resolve_cuda_options({}, 9, 0, "H100"));
  EXPECT_NE(h.find("kernel family hopper"), std::string::npos) << h;
  EXPECT_NE(h.find("wgmma"), std::string::npos) << h;
  EXPECT_NE(h.find("FP8 experts w8a8"), std::string::npos) << h;
  EXPECT_NE(h.find("quantised tiles experts auto dense auto"), std::string::npos) << h;
  const std::string p = describe_cuda_kernels(resolve_cuda_options({}, 8, 6, "A6000"));
  EXPECT_NE(p.find("kernel family portable"), std::string::npos) << p;
  EXPECT_EQ(p.find("wgmma"), std::string::npos) << p;
  EXPECT_NE(p.find("dense quant w8a8"), std::string::npos) << p;
  EXPECT_NE(p.find("FP8 experts w8a16"), std::string::npos) << p;
}

}  // namespace
}  // namespace dgemma
