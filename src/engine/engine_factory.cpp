#include "engine/engine_config.h"
#include "util/error.h"

namespace dgemma {

// Placeholder until the model-backed engine lands (issue "CPU reference engine").
std::unique_ptr<EngineInterface> create_model_engine(const EngineConfig& config) {
  fail(ErrorKind::kUnsupported, "{}: the model-backed engine is not built yet", config.model_dir);
}

}  // namespace dgemma
