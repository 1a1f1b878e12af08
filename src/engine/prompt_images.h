#pragma once
// The one check of a request's images against its prompt and what the engine accepts (ImageSupport).
#include <cstdint>
#include <vector>

#include "engine/request.h"

namespace dgemma {

// Soft tokens of an image of a grid_h x grid_w patch grid (Error(kInvalidArgument) unless the grid is a
// whole number of pooling cells).
int64_t image_soft_tokens(int64_t grid_h, int64_t grid_w, const ImageSupport& s);

// Throws Error(kInvalidArgument, ..., "messages") unless every image is allowed (count, size), its patches
// hold the grid's pixels, and its soft tokens take image-token positions of the prompt, in order and
// disjoint. Returns each image's soft-token count.
std::vector<int64_t> check_prompt_images(const GenerationRequest& r, const ImageSupport& s);

}  // namespace dgemma
