#pragma once
// The error after which the engine cannot serve any more: a tensor-parallel rank died (threw, timed out in
// a collective, NCCL failed or was aborted). The engine fails its requests with the message and refuses
// new ones, and `serve` reports unhealthy and exits non-zero (docs/DEPLOY.md "When a rank dies").
#include <string>

#include "util/error.h"

namespace dgemma {

class FatalError : public Error {
 public:
  explicit FatalError(std::string message) : Error(ErrorKind::kInternal, std::move(message)) {}
};

}  // namespace dgemma
