#include "engine/prompt_images.h"

#include "util/error.h"

namespace dgemma {

int64_t image_soft_tokens(int64_t grid_h, int64_t grid_w, const ImageSupport& s) {
  const int64_t k = s.pooling_kernel_size;
  if (grid_h <= 0 || grid_w <= 0 || k <= 0 || grid_h % k != 0 || grid_w % k != 0)
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("an image of {} x {} patches is not a whole number of {} x {} pooling cells",
                            grid_h, grid_w, k, k),
                "messages");
  return grid_h / k * (grid_w / k);
}

std::vector<int64_t> check_prompt_images(const GenerationRequest& r, const ImageSupport& s) {
  std::vector<int64_t> soft;
  if (r.images.empty()) return soft;
  auto bad = [](const std::string& m) { throw Error(ErrorKind::kInvalidArgument, m, "messages"); };
  if (s.max_per_prompt <= 0) bad("this model is served without image input (--limit-mm-per-prompt image 0)");
  if (static_cast<int64_t>(r.images.size()) > s.max_per_prompt)
    bad(fmt::format("at most {} images per prompt are allowed (--limit-mm-per-prompt), got {}",
                    s.max_per_prompt, r.images.size()));
  const int64_t plen = static_cast<int64_t>(r.prompt.size());
  int64_t end = 0;
  for (const PromptImage& im : r.images) {
    const int64_t n = image_soft_tokens(im.grid_h, im.grid_w, s);
    const int64_t values = int64_t{3} * s.patch_size * s.patch_size;
    if (!im.patches || static_cast<int64_t>(im.patches->size()) != im.grid_h * im.grid_w * values)
      bad("an image's patches do not match its grid");
    if (n > s.max_block_tokens)
      bad(
          fmt::format("an image of {} soft tokens does not fit a prefill chunk of {} tokens "
                      "(raise --max-num-batched-tokens)",
                      n, s.max_block_tokens));
    if (im.first < end || im.first + n > plen)
      bad("an image's soft tokens lie outside the prompt or overlap another's");
    for (int64_t j = im.first; j < im.first + n; ++j)
      if (r.prompt[static_cast<size_t>(j)] != s.image_token_id)
        bad(fmt::format("the prompt holds no image token at position {}, where an image's soft token goes",
                        j));
    end = im.first + n;
    soft.push_back(n);
  }
  return soft;
}

}  // namespace dgemma
