#include "support/forward.h"

namespace dgemma {

void forward_items(Backend& backend, DiffusionGemma& model, std::span<ForwardItem> items, const KvStorage& kv,
                   const DumpHook& dump) {
  const ForwardInputs in = encode_forward_inputs(model.forward_shape(), items);
  Tensor block = backend.alloc(ScalarType::kI32, {static_cast<int64_t>(in.words.size())});
  backend.from_host(block, in.words.data());
  model.forward(items, kv, in, block, dump);
}

}  // namespace dgemma
