#pragma once
// A chat request's image_url parts -> the engine's prompt images (docs/API.md "Images"): the URL read
// (data: URLs; file:// only under --allowed-local-media-path; no network fetches), the file decoded and
// preprocessed within the server's limits, and each image placeholder of the templated prompt expanded
// to <|image> + N x <|image|> + <image|>. Every problem is an Error(kInvalidArgument) naming the part.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "api/openai/openai_request.h"
#include "engine/request.h"
#include "image/composite.h"
#include "image/image.h"

namespace dgemma {

struct ImageInputPolicy {
  std::string allowed_local_media_path;  // --allowed-local-media-path (empty: file:// URLs refused)
  ImageLimits limits{size_t{20} << 20, int64_t{1} << 16, int64_t{40} * 1000 * 1000};  // bytes, side, pixels
  Rgb background = kWhite;  // RGBA images are composited over it
};

// The bytes an image URL names (data: or file://); Error(kInvalidArgument, ..., ref.param) otherwise.
std::vector<uint8_t> read_image_url(const ImageRef& ref, const ImageInputPolicy& policy);

// One image file's bytes decoded and preprocessed (Error(kInvalidArgument) naming the problem).
PromptImage prompt_image(std::span<const uint8_t> bytes, const ImageSupport& support, int max_soft_tokens,
                         const ImageInputPolicy& policy);

// The images of a request, decoded and preprocessed for `support` (max_soft_tokens: the request's
// mm_processor_kwargs, else the server's). Their `first` is set by expand_image_placeholders.
std::vector<PromptImage> load_prompt_images(const std::vector<ImageRef>& refs, const ImageInputPolicy& policy,
                                            const ImageSupport& support, std::optional<int> max_soft_tokens);

// Replaces the i-th image token of `tokens` by image i's block (boi, its soft tokens, eoi) and sets each
// image's `first`. Throws Error(kInvalidArgument, "messages") when the counts disagree.
void expand_image_placeholders(std::vector<int32_t>& tokens, std::vector<PromptImage>& images,
                               const ImageSupport& support);

}  // namespace dgemma
