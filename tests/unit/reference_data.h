#pragma once
// The reference data some tests read (the released 26B config and the published chat templates) is not
// part of the repository: CI checks it out beside the checkout, as ../shared/reference, or names the
// directory holding `reference/` with $DGEMMA_SHARED_DIR. Without it those tests skip, printing one
// line that names the missing file and where it is expected; with DGEMMA_REQUIRE_REFERENCE=1 (set by
// .ci/run) a missing file fails the test instead, so CI still proves everything.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace dgemma::testing {

inline std::filesystem::path reference_dir() {
  const char* shared = std::getenv("DGEMMA_SHARED_DIR");
  const std::filesystem::path root = shared && *shared
                                         ? std::filesystem::path(shared)
                                         : std::filesystem::path(DGEMMA_SOURCE_DIR) / ".." / "shared";
  return (root / "reference").lexically_normal();
}

// A file of the reference data, e.g. reference_path("configs/diffusiongemma-26b-a4b/config.json").
inline std::string reference_path(std::string_view relative) {
  return (reference_dir() / relative).string();
}

inline bool reference_required() {
  const char* v = std::getenv("DGEMMA_REQUIRE_REFERENCE");
  return v && *v && std::string_view(v) != "0";
}

inline std::string missing_reference_line(const std::string& path) {
  return "reference data missing: " + path +
         " (expected in ../shared/reference beside the repository, or under " +
         "$DGEMMA_SHARED_DIR/reference)";
}

}  // namespace dgemma::testing

// First statement of a test that reads `path` (a reference_path()): skips the test when it is absent,
// or fails it when DGEMMA_REQUIRE_REFERENCE=1.
#define DG_NEED_REFERENCE(path)                                                \
  do {                                                                         \
    const std::string dg_ref_path_ = (path);                                   \
    if (!std::filesystem::exists(dg_ref_path_)) {                              \
      if (::dgemma::testing::reference_required())                             \
        FAIL() << ::dgemma::testing::missing_reference_line(dg_ref_path_)      \
               << "; DGEMMA_REQUIRE_REFERENCE is set";                         \
      GTEST_SKIP() << ::dgemma::testing::missing_reference_line(dg_ref_path_); \
    }                                                                          \
  } while (0)
