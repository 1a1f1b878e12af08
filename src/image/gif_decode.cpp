// GIF through giflib: the first frame only, read record by record (later frames are never decoded), to
// what PIL's first frame converted to RGB is: the logical screen (grown to hold the frame if it spills
// over) filled with the frame's transparent index, or index 0, the frame's pixels at its offset, and every
// index mapped through the frame's color table (its own, else the global one); transparency is dropped.
#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "image/decoders.h"
#include "util/error.h"

namespace dgemma::image_detail {
namespace {

struct GifSource {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t at = 0;
};

int on_read(GifFileType* gif, GifByteType* out, int n) {
  auto* src = static_cast<GifSource*>(gif->UserData);
  const size_t want = n > 0 ? static_cast<size_t>(n) : 0;
  const size_t take = std::min(want, src->size - src->at);
  std::memcpy(out, src->data + src->at, take);
  src->at += take;
  return static_cast<int>(take);
}

struct GifHandle {
  GifFileType* gif = nullptr;
  ~GifHandle() {
    int err = 0;
    if (gif) DGifCloseFile(gif, &err);
  }
};

[[noreturn]] void gif_fail(const GifFileType* gif, const char* what) {
  const char* reason = gif ? GifErrorString(gif->Error) : nullptr;
  fail_arg("invalid GIF image: {}{}{}", what, reason ? ": " : "", reason ? reason : "");
}

}  // namespace

Image decode_gif(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  GifSource src{bytes.data(), bytes.size(), 0};
  int error = 0;
  GifHandle h;
  h.gif = DGifOpen(&src, on_read, &error);
  if (!h.gif)
    fail_arg("invalid GIF image: {}", GifErrorString(error) ? GifErrorString(error) : "cannot be opened");
  GifFileType* gif = h.gif;

  // Extensions before the first image: the graphic control block carries its transparent index.
  int transparent = -1;
  for (;;) {
    GifRecordType type;
    if (DGifGetRecordType(gif, &type) == GIF_ERROR) gif_fail(gif, "reading a record");
    if (type == TERMINATE_RECORD_TYPE) fail_arg("invalid GIF image: it contains no image");
    if (type == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(gif, &code, &ext) == GIF_ERROR) gif_fail(gif, "reading an extension");
      if (code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4) transparent = (ext[1] & 1) ? ext[4] : -1;
      while (ext) {
        if (DGifGetExtensionNext(gif, &ext) == GIF_ERROR) gif_fail(gif, "reading an extension");
      }
      continue;
    }
    if (type == IMAGE_DESC_RECORD_TYPE) break;
  }
  if (DGifGetImageDesc(gif) == GIF_ERROR) gif_fail(gif, "reading the image descriptor");
  const GifImageDesc& d = gif->Image;
  check_dimensions(d.Width, d.Height, limits, "GIF");
  const int64_t W = std::max<int64_t>(gif->SWidth, int64_t{d.Left} + d.Width);
  const int64_t H = std::max<int64_t>(gif->SHeight, int64_t{d.Top} + d.Height);
  check_dimensions(W, H, limits, "GIF");

  std::vector<uint8_t> index(static_cast<size_t>(W * H),
                             static_cast<uint8_t>(transparent >= 0 ? transparent : 0));
  std::vector<GifPixelType> line(static_cast<size_t>(d.Width));
  // Interlaced frames store rows in four passes: every 8th from 0, every 8th from 4, every 4th from 2,
  // every 2nd from 1.
  static constexpr int kStart[4] = {0, 4, 2, 1}, kStep[4] = {8, 8, 4, 2};
  const int passes = d.Interlace ? 4 : 1;
  for (int p = 0; p < passes; ++p) {
    const int start = d.Interlace ? kStart[p] : 0, step = d.Interlace ? kStep[p] : 1;
    for (int y = start; y < d.Height; y += step) {
      if (DGifGetLine(gif, line.data(), d.Width) == GIF_ERROR) gif_fail(gif, "reading the pixels");
      std::memcpy(index.data() + static_cast<size_t>((d.Top + y) * W + d.Left), line.data(), line.size());
    }
  }

  const ColorMapObject* map = d.ColorMap ? d.ColorMap : gif->SColorMap;
  Image out;
  out.width = W;
  out.height = H;
  out.channels = 3;
  out.pixels.resize(static_cast<size_t>(W * H * 3));
  for (size_t i = 0; i < index.size(); ++i) {
    const int k = index[i];
    uint8_t* o = out.pixels.data() + 3 * i;
    if (map && k < map->ColorCount) {
      o[0] = map->Colors[k].Red;
      o[1] = map->Colors[k].Green;
      o[2] = map->Colors[k].Blue;
    } else {  // no color table, or an index past it: PIL's grey ramp
      o[0] = o[1] = o[2] = static_cast<uint8_t>(k);
    }
  }
  return out;
}

}  // namespace dgemma::image_detail
