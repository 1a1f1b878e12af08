#pragma once
// The named intermediates of one forward pass for a dump hook (`dgemma generate --dump`, the golden
// tests): a name is built only when a hook is set, and the tensors that exist only to be dumped (the
// optional outputs of fused ops) are allocated only then, so a forward without a hook does no dump work.
#include <functional>
#include <initializer_list>
#include <string>

#include "backend/backend.h"

namespace dgemma {

// Receives every named intermediate of a forward pass.
using DumpHook = std::function<void(const std::string& name, const Tensor& t)>;

class ForwardDump {
 public:
  // `sharded`: a rank of a tensor-parallel group, whose per-head tensors and logits are slices (names
  // denote whole tensors, so those are not dumped).
  ForwardDump(const DumpHook& hook, Backend& backend, bool sharded)
      : hook_(hook ? &hook : nullptr), backend_(backend), sharded_(sharded) {}

  bool on() const { return hook_ != nullptr; }
  // A model-level intermediate ("decoder.input") and one of layer li ("layer<li>.<name>").
  void put(const char* name, const Tensor& t) const {
    if (hook_) (*hook_)(name, t);
  }
  void layer(int li, const char* name, const Tensor& t) const {
    if (hook_) (*hook_)("layer" + std::to_string(li) + "." + name, t);
  }
  // The same for a tensor a rank holds a slice of (its heads, its vocabulary columns).
  void whole(const char* name, const Tensor& t) const {
    if (!sharded_) put(name, t);
  }
  void layer_whole(int li, const char* name, const Tensor& t) const {
    if (!sharded_) layer(li, name, t);
  }
  // An optional output of a fused op (AttnResidualArgs::o_normed, ...): a new tensor while dumping,
  // else an empty one (not written).
  Tensor output(std::initializer_list<int64_t> dims, ScalarType type = ScalarType::kBF16) const {
    return hook_ ? backend_.alloc(type, dims) : Tensor{};
  }
  // The same on the host (MoeArgs' router outputs).
  Tensor host_output(ScalarType type, std::initializer_list<int64_t> dims) const {
    return hook_ ? host_tensor(type, dims) : Tensor{};
  }
  Backend& backend() const { return backend_; }
  bool sharded() const { return sharded_; }

 private:
  const DumpHook* hook_;
  Backend& backend_;
  bool sharded_;
};

}  // namespace dgemma
