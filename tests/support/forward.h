#pragma once
// One forward pass of a model by hand (tests): the items' input block built, sent up and run, as the
// runner does for a step, with an optional dump hook for the named intermediates.
#include <span>

#include "model/diffusion_gemma.h"

namespace dgemma {

void forward_items(Backend& backend, DiffusionGemma& model, std::span<ForwardItem> items, const KvStorage& kv,
                   const DumpHook& dump = {});

}  // namespace dgemma
