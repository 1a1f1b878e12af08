#include "backend/cuda_options.h"

#include <span>
#include <utility>

#include "util/error.h"

namespace dgemma {
namespace {

template <class E>
using Words = std::span<const std::pair<E, const char*>>;

constexpr std::pair<KernelFamily, const char*> kFamilies[] = {
    {KernelFamily::kAuto, "auto"}, {KernelFamily::kHopper, "hopper"}, {KernelFamily::kPortable, "portable"}};
constexpr std::pair<AttentionKernel, const char*> kAttention[] = {{AttentionKernel::kAuto, "auto"},
                                                                  {AttentionKernel::kPerItem, "per-item"}};
constexpr std::pair<MoeKernel, const char*> kMoe[] = {{MoeKernel::kAuto, "auto"},
                                                      {MoeKernel::kSmallRows, "small-rows"},
                                                      {MoeKernel::kMmaSync128x128, "mma-sync-128x128"},
                                                      {MoeKernel::kWgmma64x128, "wgmma-64x128"},
                                                      {MoeKernel::kTma128x256, "tma-128x256"}};
constexpr std::pair<QuantTile, const char*> kTiles[] = {{QuantTile::kAuto, "auto"},
                                                        {QuantTile::kRows32Cols64, "32x64"},
                                                        {QuantTile::kRows32Cols128K256, "32x128-k256"},
                                                        {QuantTile::kRows128Cols64, "128x64"}};
constexpr std::pair<DenseQuant, const char*> kDense[] = {
    {DenseQuant::kW8A8, "w8a8"}, {DenseQuant::kKernel, "kernel"}, {DenseQuant::kBf16, "bf16"}};
constexpr std::pair<Fp8Experts, const char*> kFp8[] = {
    {Fp8Experts::kAuto, "auto"}, {Fp8Experts::kW8A8, "w8a8"}, {Fp8Experts::kW8A16, "w8a16"}};

template <class E>
bool parse(Words<E> words, std::string_view word, E* out) {
  for (const auto& [value, name] : words)
    if (word == name) {
      *out = value;
      return true;
    }
  return false;
}

template <class E>
const char* word_of(Words<E> words, E v) {
  for (const auto& [value, name] : words)
    if (value == v) return name;
  return "?";
}

// "a, b or c"
template <class E>
std::string list(Words<E> words) {
  std::string s;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) s += i + 1 == words.size() ? " or " : ", ";
    s += words[i].second;
  }
  return s;
}

}  // namespace

bool parse_kernel_family(std::string_view word, KernelFamily* out) {
  return parse<KernelFamily>(kFamilies, word, out);
}
bool parse_attention_kernel(std::string_view word, AttentionKernel* out) {
  return parse<AttentionKernel>(kAttention, word, out);
}
bool parse_moe_kernel(std::string_view word, MoeKernel* out) {
  return parse<MoeKernel>(kMoe, word, out);
}
bool parse_quant_tile(std::string_view word, QuantTile* out) {
  return parse<QuantTile>(kTiles, word, out);
}
bool parse_dense_quant(std::string_view word, DenseQuant* out) {
  return parse<DenseQuant>(kDense, word, out);
}
bool parse_fp8_experts(std::string_view word, Fp8Experts* out) {
  return parse<Fp8Experts>(kFp8, word, out);
}

const char* kernel_family_word(KernelFamily v) {
  return word_of<KernelFamily>(kFamilies, v);
}
const char* attention_kernel_word(AttentionKernel v) {
  return word_of<AttentionKernel>(kAttention, v);
}
const char* moe_kernel_word(MoeKernel v) {
  return word_of<MoeKernel>(kMoe, v);
}
const char* quant_tile_word(QuantTile v) {
  return word_of<QuantTile>(kTiles, v);
}
const char* dense_quant_word(DenseQuant v) {
  return word_of<DenseQuant>(kDense, v);
}
const char* fp8_experts_word(Fp8Experts v) {
  return word_of<Fp8Experts>(kFp8, v);
}

std::string kernel_family_words() {
  return list<KernelFamily>(kFamilies);
}
std::string attention_kernel_words() {
  return list<AttentionKernel>(kAttention);
}
std::string moe_kernel_words() {
  return list<MoeKernel>(kMoe);
}
std::string quant_tile_words() {
  return list<QuantTile>(kTiles);
}
std::vector<QuantTile> quant_tiles() {
  std::vector<QuantTile> tiles;
  for (const auto& [tile, word] : kTiles)
    if (tile != QuantTile::kAuto) tiles.push_back(tile);
  return tiles;
}
std::string dense_quant_words() {
  return list<DenseQuant>(kDense);
}
std::string fp8_experts_words() {
  return list<Fp8Experts>(kFp8);
}

CudaOptions resolve_cuda_options(const CudaOptions& options, int major, int minor,
                                 const std::string& gpu_name) {
  CudaOptions r = options;
  const bool sm90 = major == 9;
  const std::string gpu = fmt::format("{} (sm_{}{})", gpu_name, major, minor);
  if (r.family == KernelFamily::kAuto) r.family = sm90 ? KernelFamily::kHopper : KernelFamily::kPortable;
  if (r.family == KernelFamily::kHopper && !sm90)
    fail(ErrorKind::kUnsupported,
         "--kernel-family hopper needs an sm_90 GPU (H100, H200); {} is not one: use auto or "
         "portable",
         gpu);
  const bool hopper = r.family == KernelFamily::kHopper;
  if (!hopper && (r.moe == MoeKernel::kWgmma64x128 || r.moe == MoeKernel::kTma128x256))
    fail(ErrorKind::kUnsupported,
         "the MoE kernel {} is a hopper-family kernel; the kernel family here is portable ({})",
         moe_kernel_word(r.moe), gpu);
  if (r.fp8_experts == Fp8Experts::kAuto) r.fp8_experts = hopper ? Fp8Experts::kW8A8 : Fp8Experts::kW8A16;
  if (r.fp8_experts == Fp8Experts::kW8A8 && !hopper)
    fail(ErrorKind::kUnsupported,
         "--fp8-moe w8a8 runs on the hopper kernel family; the kernel family here is portable "
         "({}): use auto or w8a16",
         gpu);
  if (r.flash_splits < 0 || r.flash_splits > 32)
    fail(ErrorKind::kInvalidArgument, "flash attention key splits must be 0 (planned) to 32, not {}",
         r.flash_splits);
  if (r.attention_score_budget < 1)
    fail(ErrorKind::kInvalidArgument, "the attention score budget must be positive, not {}",
         r.attention_score_budget);
  return r;
}

std::string describe_cuda_kernels(const CudaOptions& r) {
  const bool hopper = r.family == KernelFamily::kHopper;
  const std::string attention = r.attention == AttentionKernel::kPerItem ? "cuBLAS per item"
                                : hopper ? "flash (wgmma for head dims 256 / 512, mma.sync for 64 / 128), "
                                           "cuBLAS per item for other head dims"
                                         : "flash (mma.sync), cuBLAS per item for other head dims";
  const std::string moe = r.moe != MoeKernel::kAuto ? moe_kernel_word(r.moe)
                          : hopper ? "auto (small-rows / wgmma-64x128 / tma-128x256 by rows per expert)"
                                   : "auto (small-rows / mma-sync-128x128 by rows per expert)";
  return fmt::format(
      "kernel family {}; attention {}; bf16 MoE {}; quantised tiles experts {} dense {}; dense quant {}; "
      "FP8 experts {}",
      kernel_family_word(r.family), attention, moe, quant_tile_word(r.quant_experts),
      quant_tile_word(r.quant_dense), dense_quant_word(r.dense_quant), fp8_experts_word(r.fp8_experts));
}

}  // namespace dgemma
