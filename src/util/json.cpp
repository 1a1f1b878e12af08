#include "util/json.h"

#include "util/error.h"

namespace dgemma {

Json parse_json(std::string_view text, std::string_view what, bool is_file, int max_depth) {
  const ErrorKind kind = is_file ? ErrorKind::kInvalidFile : ErrorKind::kInvalidArgument;
  bool too_deep = false;
  auto cb = [&](int depth, Json::parse_event_t, Json&) {
    if (depth > max_depth) {
      too_deep = true;
      return false;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    if (too_deep) throw Error(kind, fmt::format("{}: JSON nested deeper than {} levels", what, max_depth));
    throw Error(kind, fmt::format("{}: invalid JSON: {}", what, e.what()));
  }
  if (too_deep) throw Error(kind, fmt::format("{}: JSON nested deeper than {} levels", what, max_depth));
  return j;
}

}  // namespace dgemma
