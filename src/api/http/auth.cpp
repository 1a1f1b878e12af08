#include "api/http/auth.h"

#include "util/error.h"

namespace dgemma {

ApiKeyAuth::ApiKeyAuth(const std::vector<std::string>& keys) {
  for (const auto& k : keys) {
    if (k.empty()) fail_arg("--api-key: empty key");
    digests_.push_back(sha256(k));
  }
}

bool ApiKeyAuth::check_key(std::string_view presented) const {
  if (digests_.empty()) return true;
  const Sha256Digest d = sha256(presented);
  bool ok = false;
  for (const auto& k : digests_) ok = digests_equal(d, k) | ok;  // no short-circuit
  return ok && !presented.empty();
}

bool ApiKeyAuth::check(const HttpRequest& req) const {
  if (digests_.empty()) return true;
  return check_key(presented_api_key(req));
}

bool ApiKeyAuth::is_protected_path(std::string_view path) {
  return path.substr(0, 4) == "/v1/" || path == "/v1" || path == "/invocations";
}

std::string presented_api_key(const HttpRequest& req) {
  const std::string auth = req.header("Authorization");
  if (auth.size() > 7 && header_name_equals(std::string_view(auth).substr(0, 7), "Bearer ")) {
    size_t start = 7;
    while (start < auth.size() && auth[start] == ' ') ++start;
    size_t end = auth.size();
    while (end > start && (auth[end - 1] == ' ' || auth[end - 1] == '\t')) --end;
    return auth.substr(start, end - start);
  }
  return req.header("X-Api-Key");
}

}  // namespace dgemma
