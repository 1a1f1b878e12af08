#include "api/openai/image_input.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "engine/prompt_images.h"
#include "image/data_url.h"
#include "image/image_processor.h"
#include "util/error.h"
#include "util/sha256.h"

namespace dgemma {
namespace {

[[noreturn]] void bad(const ImageRef& ref, const std::string& what) {
  throw Error(ErrorKind::kInvalidArgument, fmt::format("{}: {}", ref.param, what), ref.param);
}

bool starts_with_ci(const std::string& s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

std::vector<uint8_t> read_local_file(const ImageRef& ref, const ImageInputPolicy& policy) {
  namespace fs = std::filesystem;
  if (policy.allowed_local_media_path.empty())
    bad(ref, "file:// URLs are refused unless the server is started with --allowed-local-media-path");
  std::string path = ref.url.substr(7);
  if (path.rfind("localhost/", 0) == 0) path = path.substr(9);
  if (path.empty() || path[0] != '/') bad(ref, "a file:// URL must name an absolute path");
  std::error_code ec;
  const fs::path root = fs::canonical(policy.allowed_local_media_path, ec);
  if (ec) bad(ref, "the server's --allowed-local-media-path does not exist");
  const fs::path file = fs::canonical(path, ec);  // symlinks resolved: the real file must lie under the root
  if (ec) bad(ref, "no such file");
  const auto rel = file.lexically_relative(root);
  if (rel.empty() || *rel.begin() == ".." || rel.is_absolute())
    bad(ref, "the file lies outside --allowed-local-media-path");
  if (!fs::is_regular_file(file, ec)) bad(ref, "not a regular file");
  const auto size = fs::file_size(file, ec);
  if (ec) bad(ref, "the file cannot be read");
  if (size > policy.limits.max_bytes)
    bad(ref, fmt::format("the file has {} bytes, more than the limit of {} (--max-image-bytes)", size,
                         policy.limits.max_bytes));
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  std::ifstream in(file, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    bad(ref, "the file cannot be read");
  return bytes;
}

}  // namespace

std::vector<uint8_t> read_image_url(const ImageRef& ref, const ImageInputPolicy& policy) {
  const std::string& url = ref.url;
  if (starts_with_ci(url, "data:")) {
    try {
      return parse_data_url(url, policy.limits.max_bytes).bytes;
    } catch (const Error& e) {
      bad(ref, e.what());
    }
  }
  if (starts_with_ci(url, "file://")) return read_local_file(ref, policy);
  if (starts_with_ci(url, "http://") || starts_with_ci(url, "https://"))
    bad(ref,
        "this server does not fetch images over the network; send the image inline as a data: URL "
        "(data:image/png;base64,...)");
  bad(ref, "the URL must be a data: URL (or a file:// URL under --allowed-local-media-path)");
}

PromptImage prompt_image(std::span<const uint8_t> bytes, const ImageSupport& support, int max_soft_tokens,
                         const ImageInputPolicy& policy) {
  ImageProcessing proc;
  proc.patch_size = support.patch_size;
  proc.pooling_kernel_size = support.pooling_kernel_size;
  proc.max_soft_tokens = max_soft_tokens;
  PatchedImage p = process_image_bytes(bytes, proc, policy.limits, policy.background);
  PromptImage im;
  im.grid_h = p.grid_h;
  im.grid_w = p.grid_w;
  std::string key = fmt::format("{}x{}:", p.grid_h, p.grid_w);
  key.append(reinterpret_cast<const char*>(p.patches.data()), p.patches.size());
  const Sha256Digest d = sha256(key);
  std::copy(d.begin(), d.end(), im.digest.begin());
  im.patches = std::make_shared<const std::vector<uint8_t>>(std::move(p.patches));
  return im;
}

std::vector<PromptImage> load_prompt_images(const std::vector<ImageRef>& refs, const ImageInputPolicy& policy,
                                            const ImageSupport& support, std::optional<int> max_soft_tokens) {
  std::vector<PromptImage> out;
  if (refs.empty()) return out;
  if (support.max_per_prompt <= 0)
    throw Error(ErrorKind::kInvalidArgument,
                "this model is served without image input (no vision tower, or --limit-mm-per-prompt "
                "'{\"image\": 0}')",
                refs.front().param);
  if (static_cast<int64_t>(refs.size()) > support.max_per_prompt)
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("at most {} images per prompt are allowed (--limit-mm-per-prompt), got {}",
                            support.max_per_prompt, refs.size()),
                "messages");
  for (const ImageRef& ref : refs) {
    const std::vector<uint8_t> bytes = read_image_url(ref, policy);
    try {
      out.push_back(prompt_image(bytes, support, max_soft_tokens.value_or(support.max_soft_tokens), policy));
    } catch (const Error& e) {
      bad(ref, e.what());
    }
  }
  return out;
}

void expand_image_placeholders(std::vector<int32_t>& tokens, std::vector<PromptImage>& images,
                               const ImageSupport& support) {
  if (images.empty()) return;
  const int64_t found = std::count(tokens.begin(), tokens.end(), support.image_token_id);
  if (found != static_cast<int64_t>(images.size()))
    throw Error(
        ErrorKind::kInvalidArgument,
        fmt::format("the chat template rendered {} image placeholders for {} images", found, images.size()),
        "messages");
  std::vector<int32_t> out;
  size_t next = 0;
  for (int32_t id : tokens) {
    if (id != support.image_token_id) {
      out.push_back(id);
      continue;
    }
    PromptImage& im = images[next++];
    const int64_t n = image_soft_tokens(im.grid_h, im.grid_w, support);
    out.push_back(support.boi_token_id);
    im.first = static_cast<int64_t>(out.size());
    out.insert(out.end(), static_cast<size_t>(n), support.image_token_id);
    out.push_back(support.eoi_token_id);
  }
  tokens = std::move(out);
}

}  // namespace dgemma
