// The decoders round trip against the libraries' own encoders, convert every mode as PIL + the reference's
// server do, and refuse bad input (truncated, corrupt, bombs, unknown formats) with an Error naming the
// problem, never a crash or an allocation past the limits.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "image/composite.h"
#include "image/image_decode.h"
#include "image_encoders.h"
#include "util/error.h"

namespace dgemma {
namespace {

using test::Bytes;

Image decode(const Bytes& b, const ImageLimits& limits = {}) {
  return decode_image(b, limits).image;
}

// The message of the Error decoding `b` throws (fails the test if it decodes).
std::string decode_error(const Bytes& b, const ImageLimits& limits = {}) {
  try {
    decode_image(b, limits);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "decoded without an error";
  return {};
}

std::vector<uint8_t> gray_to_rgb(const std::vector<uint8_t>& g) {
  std::vector<uint8_t> out;
  for (uint8_t v : g) out.insert(out.end(), {v, v, v});
  return out;
}

TEST(ImageDecode, SniffsTheFormatFromTheBytes) {
  const Bytes png = test::encode_png_rgb8(2, 2, test::pattern_image(2, 2, 3));
  EXPECT_EQ(sniff_image_format(png), ImageFormat::kPng);
  EXPECT_EQ(sniff_image_format(test::encode_jpeg(test::jpeg_spec(4, 4), test::pattern_image(4, 4, 3))),
            ImageFormat::kJpeg);
  EXPECT_EQ(sniff_image_format(test::encode_webp(4, 4, test::pattern_image(4, 4, 3), false, true)),
            ImageFormat::kWebp);
  EXPECT_EQ(sniff_image_format(test::encode_gif(2, 2, {{0, 0, 0}, {255, 255, 255}},
                                                {{0, 0, 2, 2, false, -1, {}, {0, 1, 1, 0}}})),
            ImageFormat::kGif);
  const std::string text = "<html>not an image</html>";
  EXPECT_FALSE(sniff_image_format(Bytes(text.begin(), text.end())).has_value());
  EXPECT_NE(decode_error(Bytes(text.begin(), text.end())).find("not an image in a supported format"),
            std::string::npos);
  EXPECT_NE(decode_error({}).find("empty"), std::string::npos);
}

TEST(ImageDecode, PngColorTypesConvertLikePil) {
  const int W = 13, H = 7;
  {  // RGB 8-bit, and interlaced
    const auto rgb = test::pattern_image(W, H, 3);
    EXPECT_EQ(decode(test::encode_png_rgb8(W, H, rgb)).pixels, rgb);
    test::PngSpec s = test::png_spec(W, H, PNG_COLOR_TYPE_RGB, 8, true);
    const Image im = decode(test::encode_png(s, rgb));
    EXPECT_EQ(im.channels, 3);
    EXPECT_EQ(im.pixels, rgb);
  }
  {  // RGBA stays RGBA (composited later)
    const auto rgba = test::pattern_image(W, H, 4);
    const Image im = decode(test::encode_png_rgb8(W, H, rgba, PNG_COLOR_TYPE_RGB_ALPHA));
    EXPECT_EQ(im.channels, 4);
    EXPECT_EQ(im.pixels, rgba);
  }
  {  // gray: replicated; a tRNS colour key is ignored
    const auto g = test::pattern_image(W, H, 1);
    test::PngSpec s = test::png_spec(W, H, PNG_COLOR_TYPE_GRAY, 8);
    s.gray_trns = true;
    const Image im = decode(test::encode_png(s, g));
    EXPECT_EQ(im.channels, 3);
    EXPECT_EQ(im.pixels, gray_to_rgb(g));
  }
  {  // gray + alpha: the alpha is dropped (PIL converts LA to RGB without compositing)
    const auto la = test::pattern_image(W, H, 2);
    std::vector<uint8_t> g;
    for (size_t i = 0; i < la.size(); i += 2) g.push_back(la[i]);
    EXPECT_EQ(decode(test::encode_png_rgb8(W, H, la, PNG_COLOR_TYPE_GRAY_ALPHA)).pixels, gray_to_rgb(g));
  }
  {  // 1-bit gray: 0 / 255
    test::PngSpec s = test::png_spec(16, 2, PNG_COLOR_TYPE_GRAY, 1);
    const Image im = decode(test::encode_png(s, {0xA5, 0x0F, 0xFF, 0x00}));
    const uint8_t expect_row0[16] = {255, 0, 255, 0, 0, 255, 0, 255, 0, 0, 0, 0, 255, 255, 255, 255};
    for (int x = 0; x < 16; ++x) EXPECT_EQ(im.pixels[static_cast<size_t>(3 * x)], expect_row0[x]) << x;
  }
  {  // 16-bit RGB and RGBA keep the high byte
    std::vector<uint8_t> s16;
    std::vector<uint8_t> high;
    for (int i = 0; i < W * H * 3; ++i) {
      const uint8_t hi = test::pattern(i, 1, 0), lo = test::pattern(i, 2, 1);
      s16.insert(s16.end(), {hi, lo});
      high.push_back(hi);
    }
    test::PngSpec s = test::png_spec(W, H, PNG_COLOR_TYPE_RGB, 16);
    EXPECT_EQ(decode(test::encode_png(s, s16)).pixels, high);
  }
  {  // 16-bit gray: PIL opens it as a 16-bit integer image; converted to RGB it clips at 255
    test::PngSpec s = test::png_spec(4, 1, PNG_COLOR_TYPE_GRAY, 16);
    const Image im = decode(test::encode_png(s, {0x00, 0x07, 0x00, 0xff, 0x01, 0x00, 0xff, 0xff}));
    const std::vector<uint8_t> want = {7, 7, 7, 255, 255, 255, 255, 255, 255, 255, 255, 255};
    EXPECT_EQ(im.pixels, want);
  }
  {  // palette (4-bit) with tRNS: indices through PLTE, transparency dropped
    test::PngSpec s = test::png_spec(4, 2, PNG_COLOR_TYPE_PALETTE, 4);
    s.palette = {{10, 20, 30}, {40, 50, 60}, {70, 80, 90}};
    s.trns = {0, 128};
    const Image im = decode(test::encode_png(s, {0x01, 0x20, 0x22, 0x10}));
    const std::vector<uint8_t> want = {10, 20, 30, 40, 50, 60, 70, 80, 90, 10, 20, 30,
                                       70, 80, 90, 70, 80, 90, 40, 50, 60, 10, 20, 30};
    EXPECT_EQ(im.pixels, want);
  }
}

TEST(ImageDecode, JpegBaselineProgressiveAndGray) {
  const int W = 40, H = 24;
  const auto rgb = test::pattern_image(W, H, 3);
  for (bool progressive : {false, true})
    for (bool subsample : {false, true}) {
      test::JpegSpec s = test::jpeg_spec(W, H, 3, 95, subsample, progressive);
      const Bytes jpg = test::encode_jpeg(s, rgb);
      const Image im = decode(jpg);
      ASSERT_EQ(im.width, W);
      ASSERT_EQ(im.height, H);
      ASSERT_EQ(im.channels, 3);
      // Lossy: close to the source on average, and the same bytes decode to the same pixels.
      double mean_diff = 0;
      for (size_t i = 0; i < rgb.size(); ++i) mean_diff += std::abs(int{im.pixels[i]} - int{rgb[i]});
      EXPECT_LT(mean_diff / static_cast<double>(rgb.size()), 16) << progressive << subsample;
      EXPECT_EQ(decode(jpg).pixels, im.pixels);
    }
  const auto g = test::pattern_image(W, H, 1);
  const Image gi = decode(test::encode_jpeg(test::jpeg_spec(W, H, 1), g));
  for (int64_t i = 0; i < W * H; ++i) {
    EXPECT_EQ(gi.pixels[3 * i], gi.pixels[3 * i + 1]);
    EXPECT_EQ(gi.pixels[3 * i], gi.pixels[3 * i + 2]);
  }
  const std::string cmyk =
      decode_error(test::encode_jpeg(test::jpeg_spec(8, 8, 4), test::pattern_image(8, 8, 4)));
  EXPECT_NE(cmyk.find("CMYK"), std::string::npos) << cmyk;
}

TEST(ImageDecode, WebpLosslessIsExactAndAlphaIsKept) {
  const int W = 21, H = 9;
  const auto rgb = test::pattern_image(W, H, 3);
  const Image a = decode(test::encode_webp(W, H, rgb, false, true));
  EXPECT_EQ(a.channels, 3);
  EXPECT_EQ(a.pixels, rgb);
  auto rgba = test::pattern_image(W, H, 4);
  for (size_t i = 3; i < rgba.size(); i += 4)
    rgba[i] = std::max<uint8_t>(rgba[i], 1);  // keep colours defined
  const Image b = decode(test::encode_webp(W, H, rgba, true, true));
  EXPECT_EQ(b.channels, 4);
  EXPECT_EQ(b.pixels, rgba);
  const Image c = decode(test::encode_webp(W, H, rgb, false, false, 90));
  EXPECT_EQ(c.channels, 3);
  EXPECT_EQ(c.width, W);
}

TEST(ImageDecode, GifFirstFrameThroughItsPalette) {
  std::vector<GifColorType> global(4);
  for (int i = 0; i < 4; ++i)
    global[static_cast<size_t>(i)] = {static_cast<GifByteType>(60 * i), 7, static_cast<GifByteType>(200 - i)};
  const int W = 5, H = 11;
  std::vector<uint8_t> idx(static_cast<size_t>(W * H));
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<uint8_t>((i * 7 + i / 5) % 4);
  auto expect = [&](const Image& im, const std::vector<GifColorType>& map) {
    ASSERT_EQ(im.width, W);
    ASSERT_EQ(im.height, H);
    for (size_t i = 0; i < idx.size(); ++i) {
      EXPECT_EQ(im.pixels[3 * i], map[idx[i]].Red);
      EXPECT_EQ(im.pixels[3 * i + 1], map[idx[i]].Green);
      EXPECT_EQ(im.pixels[3 * i + 2], map[idx[i]].Blue);
    }
  };
  for (bool interlace : {false, true}) {
    test::GifFrame f{0, 0, W, H, interlace, 2, {}, idx};
    test::GifFrame second{0, 0, W, H, false, -1, {}, std::vector<uint8_t>(idx.size(), 3)};
    expect(decode(test::encode_gif(W, H, global, {f, second})), global);  // transparency and frame 2 ignored
  }
  {  // a local color table wins over the global one
    std::vector<GifColorType> local(4);
    for (int i = 0; i < 4; ++i) local[static_cast<size_t>(i)] = {1, static_cast<GifByteType>(50 * i), 3};
    expect(decode(test::encode_gif(W, H, global, {{0, 0, W, H, false, -1, local, idx}})), local);
  }
  {  // a frame smaller than the screen: the rest is index 0, or the transparent index
    test::GifFrame f{1, 1, 2, 2, false, -1, {}, {1, 1, 1, 1}};
    const Image im = decode(test::encode_gif(4, 3, global, {f}));
    EXPECT_EQ(im.width, 4);
    EXPECT_EQ(im.pixels[0], global[0].Red);
    EXPECT_EQ(im.pixels[3 * (1 * 4 + 1)], global[1].Red);
    f.transparent = 3;
    const Image t = decode(test::encode_gif(4, 3, global, {f}));
    EXPECT_EQ(t.pixels[0], global[3].Red);
  }
}

TEST(ImageDecode, TruncatedFilesAreErrors) {
  const auto rgb = test::pattern_image(24, 16, 3);
  const std::vector<Bytes> files = {
      test::encode_png_rgb8(24, 16, rgb),
      test::encode_jpeg(test::jpeg_spec(24, 16, 3, 90, true, false), rgb),
      test::encode_jpeg(test::jpeg_spec(24, 16, 3, 90, true, true), rgb),
      test::encode_webp(24, 16, rgb, false, true),
      test::encode_webp(24, 16, rgb, false, false),
      test::encode_gif(24, 16, {{0, 0, 0}, {9, 9, 9}},
                       {{0, 0, 24, 16, false, -1, {}, std::vector<uint8_t>(384, 1)}}),
  };
  for (const Bytes& f : files) {
    for (size_t cut : {f.size() / 4, f.size() / 2, f.size() - 16}) {
      const Bytes prefix(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(cut));
      try {
        decode_image(prefix);
        ADD_FAILURE() << image_format_name(*sniff_image_format(f)) << " cut to " << cut << " of " << f.size()
                      << " decoded";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
      }
    }
  }
}

TEST(ImageDecode, PngEndingAfterItsPixelsDecodesLikePil) {
  const auto rgb = test::pattern_image(24, 16, 3);
  const Bytes png = test::encode_png_rgb8(24, 16, rgb);
  EXPECT_EQ(decode(Bytes(png.begin(), png.end() - 12)).pixels, rgb);  // no IEND chunk
}

TEST(ImageDecode, CorruptBytesNeverCrash) {
  const auto rgb = test::pattern_image(20, 20, 3);
  const std::vector<Bytes> files = {
      test::encode_png_rgb8(20, 20, rgb), test::encode_jpeg(test::jpeg_spec(20, 20, 3, 90, true, true), rgb),
      test::encode_webp(20, 20, rgb, false, false),
      test::encode_gif(20, 20, {{0, 0, 0}, {9, 9, 9}},
                       {{0, 0, 20, 20, true, -1, {}, std::vector<uint8_t>(400, 1)}})};
  ImageLimits limits;  // a flipped header may claim a large image: keep the trials quick
  limits.max_pixels = 1 << 18;
  uint32_t state = 12345;
  for (const Bytes& f : files)
    for (int trial = 0; trial < 150; ++trial) {
      Bytes b = f;
      for (int k = 0; k < 1 + trial % 4; ++k) {
        state = state * 1664525u + 1013904223u;
        b[(state >> 8) % b.size()] ^= static_cast<uint8_t>(1u << (state % 8));
      }
      try {
        const DecodedImage d = decode_image(b, limits);
        EXPECT_EQ(d.image.pixels.size(), static_cast<size_t>(d.image.pixel_count() * d.image.channels));
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument) << e.what();
      }
    }
}

// A PNG whose header claims a huge image (the data is a few bytes): refused before any pixel allocation.
TEST(ImageDecode, DecompressionBombsAreRefusedFromTheHeader) {
  Bytes png = test::encode_png_rgb8(1, 1, {1, 2, 3});
  // IHDR width / height at bytes 16..23, its CRC at 29..32: patch them.
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) png[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (24 - 8 * i));
  };
  put32(16, 100000);
  put32(20, 100000);
  put32(29, static_cast<uint32_t>(crc32(0, png.data() + 12, 17)));
  const std::string e = decode_error(png);
  EXPECT_NE(e.find("pixels"), std::string::npos) << e;

  ImageLimits small;
  small.max_pixels = 1000;
  const std::string e2 = decode_error(test::encode_png_rgb8(40, 30, test::pattern_image(40, 30, 3)), small);
  EXPECT_NE(e2.find("1200 pixels exceeds the limit of 1000"), std::string::npos) << e2;
  const std::string e3 =
      decode_error(test::encode_jpeg(test::jpeg_spec(40, 30), test::pattern_image(40, 30, 3)), small);
  EXPECT_NE(e3.find("exceeds the limit"), std::string::npos) << e3;
  const std::string e4 =
      decode_error(test::encode_webp(40, 30, test::pattern_image(40, 30, 3), false, true), small);
  EXPECT_NE(e4.find("exceeds the limit"), std::string::npos) << e4;
  // A GIF whose screen is huge though its frame is one pixel.
  const std::string e5 = decode_error(
      test::encode_gif(60000, 60000, {{0, 0, 0}, {1, 1, 1}}, {{0, 0, 1, 1, false, -1, {}, {1}}}));
  EXPECT_NE(e5.find("exceeds the limit"), std::string::npos) << e5;

  ImageLimits bytes_limit;
  bytes_limit.max_bytes = 10;
  EXPECT_NE(decode_error(test::encode_png_rgb8(4, 4, test::pattern_image(4, 4, 3)), bytes_limit)
                .find("over the limit"),
            std::string::npos);
}

TEST(ImageDecode, VeryWideImagesDecode) {
  std::vector<uint8_t> row(100000 * 3);
  for (size_t i = 0; i < row.size(); ++i) row[i] = static_cast<uint8_t>(i * 31);
  const Image im = decode(test::encode_png_rgb8(100000, 1, row));
  EXPECT_EQ(im.width, 100000);
  EXPECT_EQ(im.height, 1);
  EXPECT_EQ(im.pixels, row);
}

TEST(ImageComposite, PilBlendOverWhite) {
  // PIL's paste through an L mask: DIV255(bg * (255 - a) + fg * a).
  EXPECT_EQ(blend_over(255, 0, 0), 255);
  EXPECT_EQ(blend_over(255, 0, 255), 0);
  EXPECT_EQ(blend_over(255, 0, 128), 127);
  EXPECT_EQ(blend_over(255, 100, 1), 254);
  for (int bg : {0, 17, 255})
    for (int fg = 0; fg < 256; fg += 5)
      for (int a = 0; a < 256; a += 3) {
        const double exact = (bg * (255.0 - a) + fg * a) / 255.0;
        EXPECT_LE(
            std::abs(blend_over(static_cast<uint8_t>(bg), static_cast<uint8_t>(fg), static_cast<uint8_t>(a)) -
                     exact),
            0.5 + 1e-9);
      }
  Image rgba;
  rgba.width = 2;
  rgba.height = 1;
  rgba.channels = 4;
  rgba.pixels = {10, 20, 30, 255, 10, 20, 30, 0};
  const Image rgb = to_rgb(rgba);
  EXPECT_EQ(rgb.channels, 3);
  EXPECT_EQ(rgb.pixels, (std::vector<uint8_t>{10, 20, 30, 255, 255, 255}));
  EXPECT_EQ(to_rgb(rgba, Rgb{0, 0, 0}).pixels, (std::vector<uint8_t>{10, 20, 30, 0, 0, 0}));
}

}  // namespace
}  // namespace dgemma
