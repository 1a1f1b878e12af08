// Every CUDA kernel of src/backend/cuda begins with DG_GRID_DEPENDENCY_WAIT() (core/kernel_macros.cuh):
// launched with programmatic dependent launch (CudaOptions::programmatic_launch), a kernel that read or
// wrote memory before it could race with the kernel before it in the stream. The rule is read from the
// sources: the first statement of each __global__ function's body.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Skips blanks and // or /* */ comments from `i`.
size_t skip_blank(const std::string& s, size_t i) {
  while (i < s.size()) {
    if (std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
    } else if (s.compare(i, 2, "//") == 0) {
      i = s.find('\n', i);
      if (i == std::string::npos) return s.size();
    } else if (s.compare(i, 2, "/*") == 0) {
      i = s.find("*/", i);
      if (i == std::string::npos) return s.size();
      i += 2;
    } else {
      break;
    }
  }
  return i;
}

struct Kernel {
  std::string where;  // file:line
  std::string first;  // the start of the body's first statement
};

// The __global__ definitions of one source (not in comments) and the start of each body.
std::vector<Kernel> kernels_of(const fs::path& file) {
  const std::string s = read_file(file);
  std::vector<Kernel> out;
  for (size_t at = s.find("__global__"); at != std::string::npos; at = s.find("__global__", at + 1)) {
    const size_t line_start = s.rfind('\n', at) + 1;
    if (s.substr(line_start, at - line_start).find("//") != std::string::npos) continue;  // in a comment
    const size_t brace = s.find('{', at), semi = s.find(';', at);
    if (brace == std::string::npos || (semi != std::string::npos && semi < brace)) continue;  // a declaration
    const size_t body = skip_blank(s, brace + 1);
    const int line = 1 + static_cast<int>(std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    out.push_back({file.string() + ":" + std::to_string(line), s.substr(body, 40)});
  }
  return out;
}

TEST(KernelEntry, EveryKernelWaitsForThePreviousGridFirst) {
  const fs::path root = fs::path(DGEMMA_SOURCE_DIR) / "src" / "backend" / "cuda";
  ASSERT_TRUE(fs::is_directory(root)) << root;
  int kernels = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    const std::string ext = entry.path().extension().string();
    if (!entry.is_regular_file() || (ext != ".cu" && ext != ".cuh")) continue;
    for (const Kernel& k : kernels_of(entry.path())) {
      ++kernels;
      EXPECT_EQ(k.first.rfind("DG_GRID_DEPENDENCY_WAIT();", 0), 0u)
          << k.where << ": a kernel's first statement must be DG_GRID_DEPENDENCY_WAIT(); it is \"" << k.first << "\"";
    }
  }
  EXPECT_GE(kernels, 60) << "the CUDA backend's kernels were not found";
}

TEST(KernelEntry, FindsTheBodyPastCommentsAndSkipsDeclarations) {
  const fs::path dir = fs::temp_directory_path() / "dgemma_kernel_entry_test";
  fs::create_directories(dir);
  const fs::path f = dir / "k.cu";
  {
    std::ofstream o(f);
    o << "// __global__ in a comment { x }\n"
         "__global__ void declared(int);\n"
         "template <int N>\n__global__ void __launch_bounds__(128, 2)\n    good(int a) {\n"
         "  // why\n  DG_GRID_DEPENDENCY_WAIT();\n  a += N;\n}\n"
         "__global__ void bad(int a) { a += 1; }\n";
  }
  const std::vector<Kernel> ks = kernels_of(f);
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0].first.rfind("DG_GRID_DEPENDENCY_WAIT();", 0), 0u);
  EXPECT_NE(ks[0].where.find(":4"), std::string::npos) << ks[0].where;
  EXPECT_EQ(ks[1].first.rfind("a += 1;", 0), 0u);
  fs::remove_all(dir);
}

}  // namespace
