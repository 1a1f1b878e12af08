// WebP through libwebp's animation decoder (its first frame on the canvas, RGBA), which is how PIL decodes
// every WebP file: RGBA when the file declares an alpha channel (composited later), RGB otherwise.
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>

#include "image/decoders.h"
#include "util/error.h"

namespace dgemma::image_detail {
namespace {

const char* status_text(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
      return "suspended";
    case VP8_STATUS_USER_ABORT:
      return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "the file is truncated";
    default:
      return "error";
  }
}

struct AnimDecoder {
  WebPAnimDecoder* dec = nullptr;
  ~AnimDecoder() {
    if (dec) WebPAnimDecoderDelete(dec);
  }
};

}  // namespace

Image decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status != VP8_STATUS_OK) fail_arg("invalid WebP image: {}", status_text(status));
  check_dimensions(features.width, features.height, limits, "WebP");

  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options))
    fail(ErrorKind::kInternal, "libwebp: incompatible library version");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  const WebPData data{bytes.data(), bytes.size()};
  AnimDecoder d;
  d.dec = WebPAnimDecoderNew(&data, &options);
  if (!d.dec) fail_arg("invalid WebP image: the file cannot be parsed");
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(d.dec, &info)) fail_arg("invalid WebP image: no image information");
  check_dimensions(info.canvas_width, info.canvas_height, limits, "WebP");
  uint8_t* frame = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(d.dec, &frame, &timestamp) || !frame)
    fail_arg("invalid WebP image: its first frame cannot be decoded");

  const int64_t W = info.canvas_width, H = info.canvas_height;
  Image out;
  out.width = W;
  out.height = H;
  if (features.has_alpha) {
    out.channels = 4;
    out.pixels.assign(frame, frame + W * H * 4);
  } else {
    out.channels = 3;
    out.pixels.resize(static_cast<size_t>(W * H * 3));
    for (int64_t i = 0; i < W * H; ++i) std::memcpy(out.pixels.data() + 3 * i, frame + 4 * i, 3);
  }
  return out;
}

}  // namespace dgemma::image_detail
