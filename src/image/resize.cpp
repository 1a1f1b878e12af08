#include "image/resize.h"

#include <algorithm>
#include <cmath>

#include "util/error.h"
#include "util/parallel.h"

namespace dgemma {
namespace {

constexpr double kCubicA = -0.5;  // Keys / PIL; the antialiased kernel uses it

// The cubic convolution kernel, with PyTorch's evaluation order (the rounding of each step matters).
double cubic(double x) {
  x = std::abs(x);
  if (x < 1.0) return ((kCubicA + 2) * x - (kCubicA + 3)) * x * x + 1;
  if (x < 2.0) return ((kCubicA * x - 5 * kCubicA) * x + 8 * kCubicA) * x - 4 * kCubicA;
  return 0.0;
}

// One pass along the rows (horizontal: the axis runs along x) or the columns.
Image resample_pass(const Image& src, const ResampleAxis& axis, bool horizontal) {
  Image dst;
  dst.channels = src.channels;
  dst.width = horizontal ? axis.out : src.width;
  dst.height = horizontal ? src.height : axis.out;
  dst.pixels.resize(static_cast<size_t>(dst.width * dst.height * dst.channels));
  const int C = src.channels;
  const int32_t half = axis.precision > 0 ? (int32_t{1} << (axis.precision - 1)) : 0;
  const int64_t line_stride = horizontal ? C : src.width * C;  // between taps
  parallel_for(
      static_cast<size_t>(dst.height),
      [&](size_t b, size_t e) {
        for (size_t y = b; y < e; ++y) {
          uint8_t* out = dst.row(static_cast<int64_t>(y));
          for (int64_t x = 0; x < dst.width; ++x) {
            const int64_t i = horizontal ? x : static_cast<int64_t>(y);  // output index along the axis
            const int16_t* w = axis.weights.data() + i * axis.taps;
            const int64_t n = axis.count[static_cast<size_t>(i)], first = axis.first[static_cast<size_t>(i)];
            const uint8_t* in =
                horizontal ? src.row(static_cast<int64_t>(y)) + first * C : src.row(first) + x * C;
            for (int c = 0; c < C; ++c) {
              int32_t acc = half;
              for (int64_t j = 0; j < n; ++j) acc += int32_t{in[j * line_stride + c]} * w[j];
              out[x * C + c] = static_cast<uint8_t>(std::clamp(acc >> axis.precision, 0, 255));
            }
          }
        }
      },
      8);
  return dst;
}

}  // namespace

ResampleAxis bicubic_antialias_axis(int64_t in, int64_t out) {
  DG_CHECK(in >= 1 && out >= 1);
  ResampleAxis a;
  a.in = in;
  a.out = out;
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? (4 * 0.5) * scale : 4 * 0.5;
  a.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  std::vector<double> w(static_cast<size_t>(out * a.taps), 0.0);
  a.first.resize(static_cast<size_t>(out));
  a.count.resize(static_cast<size_t>(out));
  double w_max = 0.0;
  for (int64_t i = 0; i < out; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const int64_t first = std::max(static_cast<int64_t>(center - support + 0.5), int64_t{0});
    const int64_t count =
        std::clamp(std::min(static_cast<int64_t>(center + support + 0.5), in) - first, int64_t{0}, a.taps);
    double* wi = w.data() + i * a.taps;
    double total = 0.0;
    for (int64_t j = 0; j < count; ++j) {
      wi[j] = cubic((static_cast<double>(j + first) - center + 0.5) * invscale);
      total += wi[j];
    }
    if (total != 0.0) {
      for (int64_t j = 0; j < count; ++j) {
        wi[j] /= total;
        w_max = std::max(w_max, wi[j]);
      }
    }
    a.first[static_cast<size_t>(i)] = first;
    a.count[static_cast<size_t>(i)] = count;
  }
  for (a.precision = 0; a.precision < 22; ++a.precision)
    if (static_cast<int>(0.5 + w_max * (1 << (a.precision + 1))) >= (1 << 15)) break;
  a.weights.resize(w.size());
  for (size_t k = 0; k < w.size(); ++k) {
    const double v = w[k] * (1 << a.precision);
    a.weights[k] = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return a;
}

Image resize_bicubic_antialias(const Image& image, int64_t out_height, int64_t out_width) {
  DG_CHECK(out_height >= 1 && out_width >= 1 && (image.channels == 3 || image.channels == 4));
  Image cur = image;
  if (out_width != image.width)
    cur = resample_pass(cur, bicubic_antialias_axis(image.width, out_width), true);
  if (out_height != image.height)
    cur = resample_pass(cur, bicubic_antialias_axis(image.height, out_height), false);
  return cur;
}

}  // namespace dgemma
