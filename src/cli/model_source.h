#pragma once
// Where `dgemma serve MODEL` finds its files: MODEL is a local directory, or a Hugging Face repo id
// (`org/name`, as `vllm serve` takes it) looked up in the local Hugging Face cache. Never touches the
// network: a repo that is not in the cache is an error that says what to download.
#include <string>
#include <vector>

namespace dgemma {

struct ModelSourceOptions {
  std::string revision;      // branch, tag or 40-hex commit; empty: "main"
  std::string download_dir;  // --download-dir: a cache directory searched first
  // Cache roots in the order Hugging Face uses them; empty strings are skipped. Filled from the
  // environment by default_cache_dirs().
  std::vector<std::string> cache_dirs;
};

// $HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub.
std::vector<std::string> default_cache_dirs();

// True when `id` is a well-formed repo id: `name` or `org/name`, each part of letters, digits, '-',
// '_' and '.', not starting or ending with '-' or '.', without "--" or ".." (the cache uses "--" as
// its separator), at most 96 characters each. Nothing else reaches the file system.
bool is_valid_repo_id(const std::string& id);

struct ResolvedModel {
  std::string dir;         // the directory holding config.json
  std::string repo_id;     // empty for a local directory
  std::string revision;    // the commit the snapshot is (repo ids only)
  std::vector<std::string> searched;  // cache repo folders looked at (for messages)
};

// Resolves MODEL. A directory is taken as it is; otherwise MODEL must be a repo id whose snapshot
// (refs/<revision> -> snapshots/<commit>) is in one of the caches and stays inside it (no symlink
// escaping the cache). Throws Error (kInvalidArgument) with the download command when it is absent.
ResolvedModel resolve_model(const std::string& model, const ModelSourceOptions& options);

}  // namespace dgemma
