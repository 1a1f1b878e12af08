#include "image/composite.h"

#include "util/error.h"

namespace dgemma {

Image to_rgb(Image image, Rgb background) {
  if (image.channels == 3) return image;
  DG_CHECK(image.channels == 4 && image.pixels.size() == static_cast<size_t>(image.pixel_count() * 4));
  Image out;
  out.width = image.width;
  out.height = image.height;
  out.channels = 3;
  out.pixels.resize(static_cast<size_t>(image.pixel_count() * 3));
  const uint8_t* s = image.pixels.data();
  uint8_t* d = out.pixels.data();
  for (int64_t i = 0; i < image.pixel_count(); ++i, s += 4, d += 3) {
    const uint8_t a = s[3];
    for (int c = 0; c < 3; ++c) d[c] = blend_over(background[static_cast<size_t>(c)], s[c], a);
  }
  return out;
}

}  // namespace dgemma
