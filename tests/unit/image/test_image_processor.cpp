// The processor's arithmetic without fixtures: the target sizes the reference computes (the values it
// measured), the resampler's weights and properties (the fixtures of tools/golden/make_image_fixtures.py
// check it bit for bit), the patch order, the rescale, and data: URLs.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "image/data_url.h"
#include "image/image_processor.h"
#include "image/resize.h"
#include "image_encoders.h"
#include "util/error.h"

namespace dgemma {
namespace {

ImageProcessing budget(int s) {
  ImageProcessing p;
  p.max_soft_tokens = s;
  return p;
}

Image make_image(int64_t w, int64_t h, int channels = 3, uint32_t seed = 1) {
  Image im;
  im.width = w;
  im.height = h;
  im.channels = channels;
  im.pixels = test::pattern_image(w, h, channels, seed);
  return im;
}

TEST(ImageProcessor, TargetSizesOfTheReference) {
  struct Case {
    int64_t h, w, s, want_h, want_w;
  };
  // (H, W) -> (H', W') as the reference's processor gives them.
  const Case cases[] = {
      {300, 200, 280, 960, 624},  {1000, 1500, 280, 624, 960}, {48, 2000, 280, 96, 5184},
      {768, 768, 280, 768, 768},  {3, 900, 280, 48, 13440},    {1080, 1920, 280, 576, 1056},
      {768, 1024, 280, 672, 912}, {336, 432, 70, 336, 432},    {900, 3, 280, 13440, 48},
      {1, 1, 280, 768, 768},      {1, 100000, 280, 48, 13440}, {5, 7, 70, 336, 432},
  };
  for (const Case& c : cases) {
    const TargetSize t = aspect_preserving_size(c.h, c.w, budget(static_cast<int>(c.s)));
    EXPECT_EQ(t.height, c.want_h) << c.h << "x" << c.w << " S=" << c.s;
    EXPECT_EQ(t.width, c.want_w) << c.h << "x" << c.w << " S=" << c.s;
  }
  // Every square gives 16 x 16 pooled cells at S = 280; 16:9 gives 264 and 3:2 gives 260.
  for (int64_t side : {1, 17, 300, 4000}) {
    const TargetSize t = aspect_preserving_size(side, side, budget(280));
    EXPECT_EQ(t.height / 48 * (t.width / 48), 256) << side;
  }
  for (int s : kSupportedSoftTokens)
    for (int64_t h : {1, 2, 3, 7, 48, 301, 999, 4096})
      for (int64_t w : {1, 5, 199, 640, 2000, 65535}) {
        const TargetSize t = aspect_preserving_size(h, w, budget(s));
        EXPECT_EQ(t.height % 48, 0);
        EXPECT_EQ(t.width % 48, 0);
        EXPECT_LE(t.height / 48 * (t.width / 48), s) << h << "x" << w;
      }
  EXPECT_TRUE(is_supported_soft_tokens(70));
  EXPECT_FALSE(is_supported_soft_tokens(300));
}

TEST(ImageResize, AxisWeightsFollowTheUint8Kernel) {
  for (auto [in, out] : std::vector<std::pair<int64_t, int64_t>>{
           {200, 624}, {1000, 624}, {3, 48}, {900, 13440}, {13440, 48}, {7, 5}, {1, 9}}) {
    const ResampleAxis a = bicubic_antialias_axis(in, out);
    const double scale = static_cast<double>(in) / static_cast<double>(out);
    EXPECT_EQ(a.taps, static_cast<int64_t>(std::ceil(scale >= 1 ? 2 * scale : 2.0)) * 2 + 1);
    EXPECT_GE(a.precision, 13u);
    EXPECT_LE(a.precision, 22u);
    int max_w = 0;
    for (int64_t i = 0; i < out; ++i) {
      EXPECT_GE(a.first[static_cast<size_t>(i)], 0);
      EXPECT_LE(a.first[static_cast<size_t>(i)] + a.count[static_cast<size_t>(i)], in);
      int64_t sum = 0;
      for (int64_t j = 0; j < a.taps; ++j) {
        const int w = a.weights[static_cast<size_t>(i * a.taps + j)];
        sum += w;
        max_w = std::max(max_w, w);
        if (j >= a.count[static_cast<size_t>(i)]) {
          EXPECT_EQ(w, 0);
        }
      }
      // Normalised weights rounded one by one: the sum is 2^p up to half a unit per tap.
      EXPECT_LE(std::abs(sum - (int64_t{1} << a.precision)), a.taps) << in << "->" << out << " @" << i;
    }
    // The precision is the largest that keeps the largest weight below 2^15 (one more bit would not).
    EXPECT_LT(max_w, 1 << 15);
    if (a.precision < 22) {
      EXPECT_GE(2 * max_w + 1, 1 << 15) << in << "->" << out;
    }
  }
  // Upscaling 1 pixel: one tap of weight 1.
  const ResampleAxis one = bicubic_antialias_axis(1, 9);
  for (int64_t i = 0; i < 9; ++i) {
    EXPECT_EQ(one.count[static_cast<size_t>(i)], 1);
    EXPECT_EQ(one.weights[static_cast<size_t>(i * one.taps)], 1 << one.precision);
  }
}

TEST(ImageResize, ConstantImagesStayConstantAndOnePassIsWithinOneLevelOfFloat) {
  Image flat = make_image(37, 23);
  for (uint8_t& v : flat.pixels) v = 200;
  for (auto [h, w] : std::vector<std::pair<int64_t, int64_t>>{{48, 96}, {5, 7}, {23, 300}, {100, 37}}) {
    const Image r = resize_bicubic_antialias(flat, h, w);
    ASSERT_EQ(r.pixels.size(), static_cast<size_t>(h * w * 3));
    for (uint8_t v : r.pixels) ASSERT_EQ(v, 200);
  }
  // A horizontal pass alone against the same filter in double precision.
  const Image src = make_image(301, 3);
  for (int64_t out_w : {624, 96, 48, 301 * 3}) {
    const Image r = resize_bicubic_antialias(src, 3, out_w);
    const double scale = 301.0 / static_cast<double>(out_w), support = scale >= 1 ? 2 * scale : 2.0;
    auto cubic = [](double x) {
      x = std::abs(x);
      if (x < 1) return (1.5 * x - 2.5) * x * x + 1;
      if (x < 2) return ((-0.5 * x + 2.5) * x - 4) * x + 2;
      return 0.0;
    };
    for (int64_t y = 0; y < 3; ++y)
      for (int64_t x = 0; x < out_w; ++x) {
        const double center = scale * (static_cast<double>(x) + 0.5);
        const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0),
                      hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), 301);
        for (int c = 0; c < 3; ++c) {
          double acc = 0, total = 0;
          for (int64_t j = lo; j < hi; ++j) {
            const double wj = cubic((static_cast<double>(j) - center + 0.5) / std::max(scale, 1.0));
            acc += wj * src.row(y)[j * 3 + c];
            total += wj;
          }
          const double want = std::clamp(acc / total, 0.0, 255.0);
          EXPECT_LE(std::abs(r.row(y)[x * 3 + c] - want), 1.0) << out_w << " x=" << x;
        }
      }
  }
}

TEST(ImageProcessor, PatchesAreRowMajorPatchesOfRowMajorRgbPixels) {
  const Image im = make_image(32, 48);
  const std::vector<uint8_t> p = patchify(im, 16);
  ASSERT_EQ(p.size(), im.pixels.size());
  // Patch n = (row py, column px) of a 3 x 2 grid; inside it pixel (r, c), channel ch.
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t c = 0; c < 16; ++c)
        for (int ch = 0; ch < 3; ++ch) {
          const int64_t py = n / 2, px = n % 2;
          ASSERT_EQ(p[static_cast<size_t>(n * 768 + (r * 16 + c) * 3 + ch)],
                    im.row(py * 16 + r)[(px * 16 + c) * 3 + ch]);
        }
}

TEST(ImageProcessor, PreprocessResizesOnlyWhenTheSizeChanges) {
  const Image aligned = make_image(432, 336);  // 336 x 432 (H x W): kept at 70 soft tokens
  const PatchedImage a = preprocess_image(aligned, budget(70));
  EXPECT_EQ(a.height, 336);
  EXPECT_EQ(a.width, 432);
  EXPECT_EQ(a.grid_h, 21);
  EXPECT_EQ(a.grid_w, 27);
  EXPECT_EQ(a.soft_tokens, 63);
  EXPECT_EQ(a.patches, patchify(aligned, 16));
  const PatchedImage b = preprocess_image(make_image(200, 300), budget(280));  // 300 x 200
  EXPECT_EQ(b.height, 960);
  EXPECT_EQ(b.width, 624);
  EXPECT_EQ(b.soft_tokens, 260);
  EXPECT_EQ(b.patches.size(), static_cast<size_t>(960 * 624 * 3));
  // 1 x 100000 (a strip one pixel high): 280 soft tokens, bounded work.
  const PatchedImage c = preprocess_image(make_image(100000, 1), budget(280));
  EXPECT_EQ(c.height, 48);
  EXPECT_EQ(c.width, 13440);
  EXPECT_EQ(c.soft_tokens, 280);
  // From file bytes: an RGBA PNG is composited over white first.
  std::vector<uint8_t> rgba(48 * 48 * 4, 0);  // fully transparent
  const PatchedImage d =
      process_image_bytes(test::encode_png_rgb8(48, 48, rgba, PNG_COLOR_TYPE_RGB_ALPHA), budget(70));
  EXPECT_EQ(d.height, 384);
  for (uint8_t v : d.patches) ASSERT_EQ(v, 255);
}

TEST(ImageProcessor, RescaledPixelsAreFloat32Products) {
  EXPECT_EQ(rescaled_pixel(0), 0.0f);
  EXPECT_EQ(rescaled_pixel(51), 51.0f * static_cast<float>(1.0 / 255.0));
  for (int v = 0; v < 256; ++v) EXPECT_NEAR(rescaled_pixel(static_cast<uint8_t>(v)) * 255.0, v, 2e-5);
}

std::string data_url_error(const std::string& url, size_t max_bytes = 1 << 20) {
  try {
    parse_data_url(url, max_bytes);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << url << " parsed";
  return {};
}

TEST(DataUrl, StrictBase64AsTheReferenceServer) {
  const DataUrl d = parse_data_url("data:image/png;base64,aGVsbG8gd29ybGQ=", 100);
  EXPECT_EQ(d.media_type, "image/png");
  EXPECT_EQ(std::string(d.bytes.begin(), d.bytes.end()), "hello world");
  EXPECT_EQ(parse_data_url("DATA:Image/JPEG;BASE64,YWI=", 100).media_type, "image/jpeg");
  EXPECT_EQ(parse_data_url("data:;base64,", 100).bytes.size(), 0u);
  // Any image/* type is accepted whatever the bytes are (decoding sniffs them).
  EXPECT_EQ(parse_data_url("data:image/gif;base64,YWJj", 100).bytes.size(), 3u);
  EXPECT_NE(data_url_error("data:image/png;base64,aGVsbG8gd29ybGQ").find("padding"), std::string::npos);
  EXPECT_NE(data_url_error("data:image/png;base64,aGVs bG8").find("not in the base64 alphabet"),
            std::string::npos);
  EXPECT_NE(data_url_error("data:image/png;base64,aGV\nbG8=").find("0x0a"), std::string::npos);
  EXPECT_NE(data_url_error("data:image/png;base64,a=Vs").find("alphabet"), std::string::npos);
  EXPECT_NE(data_url_error("data:image/png;base64,a-_s").find("'-'"), std::string::npos);
  EXPECT_NE(data_url_error("data:image/png,rawdata").find("base64"), std::string::npos);
  EXPECT_NE(data_url_error("data:text/plain;base64,YWJj").find("not an image type"), std::string::npos);
  EXPECT_NE(data_url_error("http://example.com/a.png").find("not a data: URL"), std::string::npos);
  EXPECT_NE(data_url_error("data:image/png;base64").find("','"), std::string::npos);
  // The size limit is checked on the encoded length, before decoding.
  EXPECT_NE(
      data_url_error("data:image/png;base64," + std::string(4000, 'A'), 2000).find("over the limit of 2000"),
      std::string::npos);
}

}  // namespace
}  // namespace dgemma
