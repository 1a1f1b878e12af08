// MODEL resolution: local directories, repo ids in a Hugging Face cache (refs -> snapshots), and the
// attempts that must never reach the file system or leave the cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/model_source.h"
#include "util/error.h"

namespace dgemma {
namespace {
namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("dgemma-ms-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";

// models--org--name/{refs/main, blobs/cfg, snapshots/<commit>/config.json -> ../../blobs/cfg}
fs::path make_repo(const fs::path& root, const std::string& folder, const std::string& ref = "main") {
  const fs::path repo = root / folder;
  write(repo / "refs" / ref, kCommit + "\n");
  write(repo / "blobs" / "cfg", "{}");
  fs::create_directories(repo / "snapshots" / kCommit);
  fs::create_symlink("../../blobs/cfg", repo / "snapshots" / kCommit / "config.json");
  return repo;
}

std::string error_of(const std::string& model, const ModelSourceOptions& o) {
  try {
    resolve_model(model, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelSource, RepoIdSyntax) {
  for (const char* ok : {"google/diffusiongemma-26B-A4B-it", "gpt2", "a/b", "Org_1/name.v2"})
    EXPECT_TRUE(is_valid_repo_id(ok)) << ok;
  for (const char* bad : {"", "/", "a/", "/b", "../x", "a/../b", "a/b/c", "a--b/c", "a/b--c", "-a/b", "a./b", "a/.b",
                          "a b/c", "a/b\\c", "~/x", "a/b\n"})
    EXPECT_FALSE(is_valid_repo_id(bad)) << bad;
  EXPECT_FALSE(is_valid_repo_id(std::string(97, 'a') + "/b"));
}

TEST(ModelSource, LocalDirectoryAsIs) {
  TempDir d;
  const ResolvedModel r = resolve_model(d.path.string(), {});
  EXPECT_EQ(r.dir, d.path.string());
  EXPECT_TRUE(r.repo_id.empty());
}

TEST(ModelSource, RepoIdFromTheCacheInOrder) {
  TempDir first, second;
  make_repo(second.path, "models--acme--tiny");
  ModelSourceOptions o;
  o.cache_dirs = {first.path.string(), second.path.string()};
  const ResolvedModel r = resolve_model("acme/tiny", o);
  EXPECT_EQ(r.dir, (second.path / "models--acme--tiny" / "snapshots" / kCommit).string());
  EXPECT_EQ(r.revision, kCommit);
  EXPECT_EQ(r.searched.size(), 2u);
  // --download-dir comes first.
  make_repo(first.path, "models--acme--tiny");
  o.download_dir = first.path.string();
  o.cache_dirs = {second.path.string()};
  EXPECT_EQ(resolve_model("acme/tiny", o).dir, (first.path / "models--acme--tiny" / "snapshots" / kCommit).string());
}

TEST(ModelSource, RevisionsBranchesAndCommits) {
  TempDir d;
  make_repo(d.path, "models--acme--tiny", "v1");
  ModelSourceOptions o;
  o.cache_dirs = {d.path.string()};
  o.revision = "v1";
  EXPECT_EQ(resolve_model("acme/tiny", o).revision, kCommit);
  o.revision = kCommit;  // a commit needs no ref
  EXPECT_EQ(resolve_model("acme/tiny", o).revision, kCommit);
  o.revision = "main";  // no such ref
  EXPECT_NE(error_of("acme/tiny", o).find("hf download acme/tiny"), std::string::npos);
  for (const char* bad : {"../main", "/etc", "a//b", "x y"}) {
    o.revision = bad;
    EXPECT_NE(error_of("acme/tiny", o).find("is not a branch, tag or 40-digit commit"), std::string::npos) << bad;
  }
}

TEST(ModelSource, AbsentSaysWhatToDownload) {
  TempDir d;
  ModelSourceOptions o;
  o.cache_dirs = {d.path.string()};
  const std::string e = error_of("acme/absent", o);
  EXPECT_NE(e.find("dgemma never downloads"), std::string::npos) << e;
  EXPECT_NE(e.find("`hf download acme/absent`"), std::string::npos) << e;
  EXPECT_NE(e.find("`huggingface-cli download acme/absent`"), std::string::npos) << e;
  EXPECT_NE(e.find((d.path / "models--acme--absent").string()), std::string::npos) << e;
}

TEST(ModelSource, NothingEscapesTheCache) {
  TempDir d, outside;
  write(outside.path / "config.json", "{}");
  // A snapshot entry linking outside the repo folder.
  const fs::path repo = make_repo(d.path, "models--acme--evil");
  fs::remove(repo / "snapshots" / kCommit / "config.json");
  fs::create_symlink(outside.path / "config.json", repo / "snapshots" / kCommit / "config.json");
  ModelSourceOptions o;
  o.cache_dirs = {d.path.string()};
  EXPECT_NE(error_of("acme/evil", o).find("links outside its cache folder"), std::string::npos);
  // A snapshot directory that is itself a link out of the cache.
  const fs::path repo2 = d.path / "models--acme--evil2";
  write(repo2 / "refs" / "main", kCommit);
  fs::create_directories(repo2 / "snapshots");
  fs::create_directory_symlink(outside.path, repo2 / "snapshots" / kCommit);
  EXPECT_NE(error_of("acme/evil2", o).find("leads outside its cache folder"), std::string::npos);
  // A ref that is not a commit (it could name a path).
  const fs::path repo3 = d.path / "models--acme--evil3";
  write(repo3 / "refs" / "main", "../../../../etc");
  EXPECT_NE(error_of("acme/evil3", o).find("corrupt ref"), std::string::npos);
  // Path-like or malformed MODEL values are refused before any lookup.
  for (const char* bad : {"../acme/tiny", "acme/../tiny", "/nonexistent/x", "a/b/c"})
    EXPECT_NE(error_of(bad, o).find("is neither a directory nor a Hugging Face repo id"), std::string::npos) << bad;
}

}  // namespace
}  // namespace dgemma
