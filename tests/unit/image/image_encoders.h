#pragma once
// Test images encoded with the same libraries the decoders use (libpng, libjpeg, libwebp, giflib), so the
// decoders can be checked round trip without fixture files.
// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on
#include <gif_lib.h>
#include <png.h>
#include <webp/encode.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace dgemma::test {

using Bytes = std::vector<uint8_t>;

// A deterministic pattern: value of channel c at (x, y), in 0..255 (mixes gradients and noise).
inline uint8_t pattern(int64_t x, int64_t y, int c, uint32_t seed = 1) {
  uint32_t h = static_cast<uint32_t>(x) * 73856093u ^ static_cast<uint32_t>(y) * 19349663u ^
               static_cast<uint32_t>(c + 1) * 83492791u ^ seed * 2654435761u;
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return static_cast<uint8_t>((h & 0x3f) + static_cast<uint32_t>((x * 3 + y * 5 + c * 40) % 192));
}

inline std::vector<uint8_t> pattern_image(int64_t w, int64_t h, int channels, uint32_t seed = 1) {
  std::vector<uint8_t> out(static_cast<size_t>(w * h * channels));
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int c = 0; c < channels; ++c)
        out[static_cast<size_t>((y * w + x) * channels + c)] = pattern(x, y, c, seed);
  return out;
}

struct PngSpec {
  int width = 0, height = 0;
  int color_type = PNG_COLOR_TYPE_RGB;
  int bit_depth = 8;
  bool interlace = false;
  std::vector<png_color> palette;  // PNG_COLOR_TYPE_PALETTE
  std::vector<uint8_t> trns;       // palette alpha entries (PNG_COLOR_TYPE_PALETTE)
  bool gray_trns = false;          // a tRNS colour key on gray / RGB images (value 0)
};

inline PngSpec png_spec(int width, int height, int color_type, int bit_depth, bool interlace = false) {
  PngSpec s;
  s.width = width;
  s.height = height;
  s.color_type = color_type;
  s.bit_depth = bit_depth;
  s.interlace = interlace;
  return s;
}

// samples: rows of packed samples as libpng expects them (16-bit samples big-endian).
inline Bytes encode_png(const PngSpec& s, const std::vector<uint8_t>& samples) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    throw std::runtime_error("png encode failed");
  }
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep d, png_size_t n) {
        auto* o = static_cast<Bytes*>(png_get_io_ptr(p));
        o->insert(o->end(), d, d + n);
      },
      nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(s.width), static_cast<png_uint_32>(s.height), s.bit_depth,
               s.color_type, s.interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty())
    png_set_PLTE(png, info, const_cast<png_colorp>(s.palette.data()), static_cast<int>(s.palette.size()));
  if (!s.trns.empty())
    png_set_tRNS(png, info, const_cast<png_bytep>(s.trns.data()), static_cast<int>(s.trns.size()), nullptr);
  if (s.gray_trns) {
    png_color_16 key{};
    png_set_tRNS(png, info, nullptr, 0, &key);
  }
  png_write_info(png, info);
  if (s.interlace) png_set_interlace_handling(png);
  const size_t row_bytes = png_get_rowbytes(png, info);
  std::vector<png_bytep> rows(static_cast<size_t>(s.height));
  for (int y = 0; y < s.height; ++y)
    rows[static_cast<size_t>(y)] = const_cast<uint8_t*>(samples.data()) + y * row_bytes;
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

inline Bytes encode_png_rgb8(int w, int h, const std::vector<uint8_t>& rgb,
                             int color_type = PNG_COLOR_TYPE_RGB) {
  PngSpec s;
  s.width = w;
  s.height = h;
  s.color_type = color_type;
  return encode_png(s, rgb);
}

struct JpegSpec {
  int width = 0, height = 0;
  int components = 3;  // 1 (gray), 3 (YCbCr from RGB), 4 (CMYK)
  int quality = 95;
  bool subsample = true;  // 4:2:0, else 4:4:4
  bool progressive = false;
};

inline JpegSpec jpeg_spec(int width, int height, int components = 3, int quality = 95, bool subsample = true,
                          bool progressive = false) {
  JpegSpec s;
  s.width = width;
  s.height = height;
  s.components = components;
  s.quality = quality;
  s.subsample = subsample;
  s.progressive = progressive;
  return s;
}

inline Bytes encode_jpeg(const JpegSpec& s, const std::vector<uint8_t>& pixels) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(s.width);
  c.image_height = static_cast<JDIMENSION>(s.height);
  c.input_components = s.components;
  c.in_color_space = s.components == 1 ? JCS_GRAYSCALE : s.components == 4 ? JCS_CMYK : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, s.quality, TRUE);
  if (s.components == 3 && !s.subsample)
    for (int i = 0; i < 3; ++i) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  if (s.progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row =
        const_cast<uint8_t*>(pixels.data()) + static_cast<size_t>(c.next_scanline) * s.width * s.components;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(buf, buf + size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

inline Bytes encode_webp(int w, int h, const std::vector<uint8_t>& pixels, bool alpha, bool lossless,
                         float quality = 90) {
  uint8_t* buf = nullptr;
  size_t n = 0;
  if (lossless)
    n = alpha ? WebPEncodeLosslessRGBA(pixels.data(), w, h, w * 4, &buf)
              : WebPEncodeLosslessRGB(pixels.data(), w, h, w * 3, &buf);
  else
    n = alpha ? WebPEncodeRGBA(pixels.data(), w, h, w * 4, quality, &buf)
              : WebPEncodeRGB(pixels.data(), w, h, w * 3, quality, &buf);
  if (n == 0) throw std::runtime_error("webp encode failed");
  Bytes out(buf, buf + n);
  WebPFree(buf);
  return out;
}

struct GifFrame {
  int left = 0, top = 0, width = 0, height = 0;
  bool interlace = false;
  int transparent = -1;              // graphic control extension transparent index
  std::vector<GifColorType> colors;  // local color table (empty: none)
  std::vector<uint8_t> indices;      // width * height, row-major
};

inline Bytes encode_gif(int screen_w, int screen_h, const std::vector<GifColorType>& global,
                        const std::vector<GifFrame>& frames, int background = 0) {
  Bytes out;
  int error = 0;
  GifFileType* gif = EGifOpen(
      &out,
      [](GifFileType* g, const GifByteType* d, int n) {
        auto* o = static_cast<Bytes*>(g->UserData);
        o->insert(o->end(), d, d + n);
        return n;
      },
      &error);
  if (!gif) throw std::runtime_error("gif open failed");
  EGifSetGifVersion(gif, true);
  auto make_map = [](const std::vector<GifColorType>& c) -> ColorMapObject* {
    if (c.empty()) return nullptr;
    return GifMakeMapObject(static_cast<int>(c.size()), c.data());
  };
  ColorMapObject* gmap = make_map(global);
  if (EGifPutScreenDesc(gif, screen_w, screen_h, 8, background, gmap) == GIF_ERROR)
    throw std::runtime_error("gif screen");
  for (const GifFrame& f : frames) {
    if (f.transparent >= 0) {
      GifByteType gce[4] = {1, 0, 0, static_cast<GifByteType>(f.transparent)};
      EGifPutExtension(gif, GRAPHICS_EXT_FUNC_CODE, 4, gce);
    }
    ColorMapObject* lmap = make_map(f.colors);
    if (EGifPutImageDesc(gif, f.left, f.top, f.width, f.height, f.interlace, lmap) == GIF_ERROR)
      throw std::runtime_error("gif image desc");
    // Interlaced frames are written in the four passes' row order.
    std::vector<int> order;
    if (f.interlace) {
      const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
      for (int p = 0; p < 4; ++p)
        for (int y = start[p]; y < f.height; y += step[p]) order.push_back(y);
    } else {
      for (int y = 0; y < f.height; ++y) order.push_back(y);
    }
    for (int y : order)
      if (EGifPutLine(gif, const_cast<GifPixelType*>(f.indices.data()) + y * f.width, f.width) == GIF_ERROR)
        throw std::runtime_error("gif line");
    if (lmap) GifFreeMapObject(lmap);
  }
  EGifCloseFile(gif, &error);
  if (gmap) GifFreeMapObject(gmap);
  return out;
}

}  // namespace dgemma::test
