#pragma once
// A model's host weights (CPU tensors: a CPU-backend load, or a rank's shard of one) onto another
// backend: every tensor uploaded, every linear through Backend::upload_weight (the backend's placement
// of quantised formats), the checkpoint's mapping kept alive. What a load straight onto that backend
// gives, tensor for tensor.
#include "backend/backend.h"
#include "model/weights.h"

namespace dgemma {

ModelWeights upload_model_weights(const ModelWeights& host, Backend& backend);

}  // namespace dgemma
