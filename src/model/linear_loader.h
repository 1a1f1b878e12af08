#pragma once
// Reads one linear layer's weight from a checkpoint in whichever format its tensors are stored
// (docs/QUANTIZATION.md), deciding per module from what is present:
//   <m>.weight BF16/F16/F32                               -> bf16
//   <m>.weight F8_E4M3 + <m>.weight_scale [N,1]/[N]/[]     -> FP8 per channel (compressed-tensors)
//   <m>.weight U8 [N,K/2] + weight_scale F8 [N,K/16] + weight_scale_2 F32 []  -> NVFP4 (ModelOpt)
//   <m>.weight_packed U8 [N,K/2] + weight_scale F8 [N,K/16] + weight_global_scale F32 [1]
//                                                          -> NVFP4 (compressed-tensors; global inverted)
// and validates everything against the model's shape and the checkpoint's quantisation config.
// Per-expert modules (experts.E.{gate,up,down}_proj) are stacked: gate rows, then up rows, each with
// its own global scale.
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backend/weight.h"
#include "model/quant_config.h"

namespace dgemma {

class SafetensorsCheckpoint;
struct TensorInfo;

std::string shape_string(const std::vector<int64_t>& s);
// A checkpoint tensor as a bf16 host tensor: borrowed from the mmap when it already is aligned bf16,
// else converted (F16, F32).
Tensor checkpoint_bf16_tensor(const TensorInfo& t, const std::vector<int64_t>& shape);

class LinearLoader {
 public:
  LinearLoader(const SafetensorsCheckpoint& ckpt, const QuantConfig& quant, std::vector<std::string>& problems,
               std::set<std::string>& used)
      : ckpt_(ckpt), quant_(quant), problems_(problems), used_(used) {}
  // Header checks only (names, dtypes, shapes): no tensor data is read and the returned weights
  // carry the format alone (dgemma inspect of large checkpoints).
  void set_headers_only(bool on) { headers_only_ = on; }

  // The module of logical shape [N, K] at `module` (a full checkpoint name without the suffix), or
  // nullopt after recording the problems (missing tensor, wrong shape or dtype, bad scales, ...).
  std::optional<Weight> read(const std::string& module, int64_t N, int64_t K);
  // Per-expert modules prefix.E.{gate_proj, up_proj} stacked to [E, 2I, H] (gate_up) or
  // prefix.E.down_proj to [E, H, I]; nullopt after recording problems.
  std::optional<Weight> read_experts(const std::string& prefix, int64_t E, int64_t I, int64_t H, bool gate_up);
  // True when the checkpoint holds any tensor of `module` (any suffix this loader reads).
  bool has_module(const std::string& module) const;

  void problem(std::string msg) { problems_.push_back(std::move(msg)); }

 private:
  const SafetensorsCheckpoint& ckpt_;
  const QuantConfig& quant_;
  std::vector<std::string>& problems_;
  std::set<std::string>& used_;
  bool headers_only_ = false;
};

}  // namespace dgemma
