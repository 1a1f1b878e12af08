#include "cli/model_source.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "util/error.h"
#include "util/log.h"

namespace dgemma {
namespace fs = std::filesystem;
namespace {

bool valid_part(const std::string& s) {
  if (s.empty() || s.size() > 96) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  if (s.front() == '-' || s.front() == '.' || s.back() == '-' || s.back() == '.') return false;
  return s.find("--") == std::string::npos && s.find("..") == std::string::npos;
}

bool is_commit(const std::string& s) {
  return s.size() == 40 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// A branch or tag name as the cache stores it under refs/ (may contain '/', as in "pr/1").
bool valid_revision(const std::string& s) {
  if (s.empty() || s.size() > 128 || s.front() == '/' || s.back() == '/') return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' && c != '/') return false;
  return s.find("..") == std::string::npos && s.find("//") == std::string::npos;
}

bool inside(const fs::path& root, const fs::path& p) {
  const std::string r = root.string() + "/", s = p.string();
  return s.rfind(r, 0) == 0;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string download_hint(const std::string& id, const std::string& revision, const std::string& download_dir) {
  std::string args = id;
  if (revision != "main") args += " --revision " + revision;
  if (!download_dir.empty()) args += " --cache-dir " + download_dir;
  return fmt::format("download it first with `hf download {0}` (older huggingface_hub: `huggingface-cli download {0}`)",
                     args);
}

// The snapshot of `id` at `revision` in one cache root, or "" when this root does not have it.
// Throws when the cache has it but it is unusable (escaping symlinks, a corrupt ref).
std::string snapshot_in(const fs::path& root, const std::string& id, const std::string& revision,
                        std::vector<std::string>& searched, std::string& commit) {
  std::string folder = "models--" + id;
  for (size_t p = folder.find('/'); p != std::string::npos; p = folder.find('/')) folder.replace(p, 1, "--");
  const fs::path repo = root / folder;
  searched.push_back(repo.string());
  std::error_code ec;
  if (!fs::is_directory(repo, ec)) return {};
  const fs::path repo_real = fs::canonical(repo, ec);
  if (ec) return {};
  commit = revision;
  if (!is_commit(revision)) {
    std::ifstream in(repo / "refs" / revision);
    if (!in) return {};
    std::string text;
    std::getline(in, text);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    if (!is_commit(text))
      fail_arg("the Hugging Face cache entry {} has a corrupt ref '{}' (expected a 40-digit commit)",
               (repo / "refs" / revision).string(), revision);
    commit = text;
  }
  const fs::path snap = repo / "snapshots" / commit;
  if (!fs::is_directory(snap, ec)) return {};
  const fs::path snap_real = fs::canonical(snap, ec);
  if (ec || !inside(repo_real, snap_real))
    fail_arg("the snapshot {} leads outside its cache folder; refusing it", snap.string());
  for (const auto& entry : fs::directory_iterator(snap, ec)) {
    const fs::path real = fs::weakly_canonical(entry.path(), ec);
    if (ec || !inside(repo_real, real))
      fail_arg("{} in the Hugging Face cache links outside its cache folder ({}); refusing it",
               entry.path().string(), real.string());
  }
  if (!fs::is_regular_file(snap / "config.json", ec))
    fail_arg("the snapshot {} has no config.json (an incomplete download? {})", snap.string(),
             download_hint(id, revision, ""));
  return snap.string();
}

}  // namespace

std::vector<std::string> default_cache_dirs() {
  std::vector<std::string> dirs;
  if (auto v = env("HF_HUB_CACHE"); !v.empty()) dirs.push_back(v);
  if (auto v = env("HUGGINGFACE_HUB_CACHE"); !v.empty()) dirs.push_back(v);
  if (auto v = env("HF_HOME"); !v.empty()) dirs.push_back((fs::path(v) / "hub").string());
  if (auto v = env("XDG_CACHE_HOME"); !v.empty()) dirs.push_back((fs::path(v) / "huggingface" / "hub").string());
  if (auto v = env("HOME"); !v.empty()) dirs.push_back((fs::path(v) / ".cache" / "huggingface" / "hub").string());
  return dirs;
}

bool is_valid_repo_id(const std::string& id) {
  const size_t slash = id.find('/');
  if (slash == std::string::npos) return valid_part(id);
  if (id.find('/', slash + 1) != std::string::npos) return false;
  return valid_part(id.substr(0, slash)) && valid_part(id.substr(slash + 1));
}

ResolvedModel resolve_model(const std::string& model, const ModelSourceOptions& o) {
  ResolvedModel r;
  std::error_code ec;
  if (model.empty()) fail_arg("no model given (dgemma serve MODEL, or --model MODEL)");
  if (fs::is_directory(model, ec)) {
    if (!o.revision.empty() && o.revision != "main")
      DG_LOG_WARN("serve", "--revision {}: ignored, MODEL is a local directory", o.revision);
    r.dir = model;
    return r;
  }
  const bool looks_like_path = model.front() == '/' || model.front() == '.' || model.front() == '~' ||
                               model.find('\\') != std::string::npos ||
                               std::count(model.begin(), model.end(), '/') > 1;
  if (looks_like_path || !is_valid_repo_id(model))
    fail_arg("MODEL '{}' is neither a directory nor a Hugging Face repo id (org/name)", model);
  const std::string revision = o.revision.empty() ? "main" : o.revision;
  if (!is_commit(revision) && !valid_revision(revision))
    fail_arg("--revision '{}' is not a branch, tag or 40-digit commit", revision);
  r.repo_id = model;
  std::vector<std::string> roots;
  if (!o.download_dir.empty()) roots.push_back(o.download_dir);
  for (const auto& d : o.cache_dirs)
    if (!d.empty() && std::find(roots.begin(), roots.end(), d) == roots.end()) roots.push_back(d);
  for (const auto& root : roots) {
    std::string commit;
    std::string dir = snapshot_in(root, model, revision, r.searched, commit);
    if (!dir.empty()) {
      r.dir = std::move(dir);
      r.revision = commit;
      return r;
    }
  }
  std::string where;
  for (const auto& s : r.searched) where += (where.empty() ? "" : ", ") + s;
  fail_arg("MODEL '{}' (revision {}) is not a directory and not in the local Hugging Face cache (looked in {}); "
           "dgemma never downloads: {}",
           model, revision, where.empty() ? "no cache directory" : where, download_hint(model, revision, o.download_dir));
}

}  // namespace dgemma
