// libFuzzer target for the image path: the input bytes are an image file (or, starting with "data:", a
// data: URL) -> decode -> RGB -> the processor's resize and patches at 70 soft tokens. Any dgemma::Error
// is an expected rejection; any other exception, a crash or a sanitizer report is a bug. The limits are
// small so that a run stays fast, as a server's would keep memory bounded.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "image/composite.h"
#include "image/data_url.h"
#include "image/image_decode.h"
#include "image/image_processor.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dgemma::ImageLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_pixels = 1 << 20;
  limits.max_side = 1 << 14;
  dgemma::ImageProcessing processing;
  processing.max_soft_tokens = 70;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    std::span<const uint8_t> bytes(data, size);
    dgemma::DataUrl url;
    if (text.starts_with("data:")) {
      url = dgemma::parse_data_url(text, limits.max_bytes);
      bytes = url.bytes;
    }
    const dgemma::DecodedImage d = dgemma::decode_image(bytes, limits);
    const dgemma::Image& im = d.image;
    if (im.width <= 0 || im.height <= 0 || im.width * im.height > limits.max_pixels ||
        im.pixels.size() != static_cast<size_t>(im.width * im.height * im.channels))
      std::abort();
    const dgemma::PatchedImage p = dgemma::preprocess_image(dgemma::to_rgb(im), processing);
    if (p.soft_tokens <= 0 || p.soft_tokens > 70 ||
        p.patches.size() != static_cast<size_t>(p.num_patches() * 768))
      std::abort();
  } catch (const dgemma::Error&) {
    // Rejected cleanly.
  }
  return 0;
}
