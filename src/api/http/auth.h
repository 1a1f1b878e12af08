#pragma once
// API-key check: keys are kept only as SHA-256 digests and compared in constant time against every
// configured key (no early exit), so response timing reveals nothing about a key's prefix.
// Accepted forms: "Authorization: Bearer KEY" (OpenAI clients) and "X-Api-Key: KEY".
#include <string>
#include <string_view>
#include <vector>

#include "api/http/http_server.h"
#include "util/sha256.h"

namespace dgemma {

class ApiKeyAuth {
 public:
  ApiKeyAuth() = default;
  explicit ApiKeyAuth(const std::vector<std::string>& keys);

  bool enabled() const { return !digests_.empty(); }
  // True if the key matches one of the configured keys (always true when none are configured).
  bool check_key(std::string_view presented) const;
  // Extracts the presented key from the headers ("" if none) and checks it.
  bool check(const HttpRequest& req) const;
  // Which paths need a key: everything under /v1/ (vLLM's rule) and /invocations, which generates too
  // (vLLM leaves it open); /health, /ping, /metrics, /version, /tokenize and /detokenize stay public.
  static bool is_protected_path(std::string_view path);

 private:
  std::vector<Sha256Digest> digests_;
};

// The key from "Authorization: Bearer KEY" (scheme case-insensitive) or "X-Api-Key: KEY"; "" if absent.
std::string presented_api_key(const HttpRequest& req);

}  // namespace dgemma
