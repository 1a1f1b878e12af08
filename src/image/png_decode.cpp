// PNG through libpng, to the pixels PIL's Image.open + convert("RGB") give (RGBA kept for compositing):
// 16-bit samples keep their high byte (PIL's ";16B" unpackers), except 16-bit grayscale, which PIL opens
// as a 16-bit integer image and converts to RGB by clipping at 255; palette indices map through PLTE;
// grayscale is replicated; LA drops its alpha; tRNS is ignored (PIL's convert("RGB") drops it); no
// gamma or colour profile is applied.
//
// libpng reports errors by longjmp: the two functions that call into it keep only plain data on their
// frames and report failure by their return value; the C++ side throws afterwards.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "image/decoders.h"
#include "util/error.h"

namespace dgemma::image_detail {
namespace {

constexpr int kErrorChars = 200;

struct PngSource {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t at = 0;
  char error[kErrorChars] = {};
};

void on_error(png_structp png, png_const_charp message) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->error, sizeof(src->error), "%s", message ? message : "unknown error");
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void on_read(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->at) png_error(png, "the file is truncated");
  std::memcpy(out, src->data + src->at, n);
  src->at += n;
}

// How the rows are read and turned into RGB / RGBA.
enum class Layout {
  kRgb,      // libpng delivers RGB
  kRgba,     // libpng delivers RGBA
  kGray16,   // 16-bit gray samples, clipped at 255
  kPalette,  // 8-bit palette indices
};

struct Header {
  uint32_t width = 0, height = 0;
  Layout layout = Layout::kRgb;
  size_t row_bytes = 0;
  png_color palette[256] = {};
  int palette_size = 0;
};

bool read_header(png_structp png, png_infop info, Header* h) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  h->width = png_get_image_width(png, info);
  h->height = png_get_image_height(png, info);
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  switch (color) {
    case PNG_COLOR_TYPE_PALETTE: {
      h->layout = Layout::kPalette;
      if (depth < 8) png_set_packing(png);
      png_colorp pal = nullptr;
      int n = 0;
      if (png_get_PLTE(png, info, &pal, &n) & PNG_INFO_PLTE) {
        h->palette_size = n < 256 ? n : 256;
        std::memcpy(h->palette, pal, sizeof(png_color) * static_cast<size_t>(h->palette_size));
      }
      break;
    }
    case PNG_COLOR_TYPE_GRAY:
      if (depth == 16) {
        h->layout = Layout::kGray16;
      } else {
        if (depth < 8) png_set_expand_gray_1_2_4_to_8(png);
        png_set_gray_to_rgb(png);
      }
      break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      png_set_strip_16(png);
      png_set_strip_alpha(png);
      png_set_gray_to_rgb(png);
      break;
    case PNG_COLOR_TYPE_RGB:
      png_set_strip_16(png);
      break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
      png_set_strip_16(png);
      h->layout = Layout::kRgba;
      break;
    default:
      png_error(png, "unsupported color type");
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  h->row_bytes = png_get_rowbytes(png, info);
  return true;
}

bool read_rows(png_structp png, png_bytep* rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  return true;
}

// The chunks after the pixels; like PIL, a file whose pixels are complete is accepted whatever follows.
void read_end(png_structp png) {
  if (setjmp(png_jmpbuf(png))) return;
  png_read_end(png, nullptr);
}

struct PngHandles {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngHandles() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

}  // namespace

Image decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  PngSource src;
  src.data = bytes.data();
  src.size = bytes.size();
  PngHandles h;
  h.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
  if (!h.png) fail(ErrorKind::kResourceExhausted, "out of memory decoding a PNG image");
  h.info = png_create_info_struct(h.png);
  if (!h.info) fail(ErrorKind::kResourceExhausted, "out of memory decoding a PNG image");
  png_set_read_fn(h.png, &src, on_read);
  // Ancillary chunks (text, profiles) are bounded too: a compressed chunk may not inflate past 8 MB.
  png_set_chunk_malloc_max(h.png, 8u << 20);
  png_set_user_limits(h.png, 0x7fffffff, 0x7fffffff);  // the limits are checked below, with a clear error

  Header header;
  if (!read_header(h.png, h.info, &header)) fail_arg("invalid PNG image: {}", src.error);
  check_dimensions(header.width, header.height, limits, "PNG");

  const int64_t W = header.width, H = header.height;
  std::vector<uint8_t> raw(static_cast<size_t>(H) * header.row_bytes);
  std::vector<png_bytep> rows(static_cast<size_t>(H));
  for (int64_t y = 0; y < H; ++y)
    rows[static_cast<size_t>(y)] = raw.data() + static_cast<size_t>(y) * header.row_bytes;
  if (!read_rows(h.png, rows.data())) fail_arg("invalid PNG image: {}", src.error);
  read_end(h.png);

  Image out;
  out.width = W;
  out.height = H;
  out.channels = header.layout == Layout::kRgba ? 4 : 3;
  switch (header.layout) {
    case Layout::kRgb:
    case Layout::kRgba:
      if (header.row_bytes != static_cast<size_t>(W * out.channels))
        fail_arg("invalid PNG image: unexpected row size");
      out.pixels = std::move(raw);
      break;
    case Layout::kGray16:
      out.pixels.resize(static_cast<size_t>(W * H * 3));
      for (int64_t y = 0; y < H; ++y) {
        const uint8_t* s = rows[static_cast<size_t>(y)];
        uint8_t* d = out.row(y);
        for (int64_t x = 0; x < W; ++x) {
          const unsigned v = (unsigned{s[2 * x]} << 8) | s[2 * x + 1];  // big-endian sample
          d[3 * x] = d[3 * x + 1] = d[3 * x + 2] = static_cast<uint8_t>(v > 255 ? 255 : v);
        }
      }
      break;
    case Layout::kPalette:
      out.pixels.resize(static_cast<size_t>(W * H * 3));
      for (int64_t y = 0; y < H; ++y) {
        const uint8_t* s = rows[static_cast<size_t>(y)];
        uint8_t* d = out.row(y);
        for (int64_t x = 0; x < W; ++x) {
          const int i = s[x];
          if (i < header.palette_size) {
            d[3 * x] = header.palette[i].red;
            d[3 * x + 1] = header.palette[i].green;
            d[3 * x + 2] = header.palette[i].blue;
          } else {  // an index past the palette: PIL's palette entries default to a grey ramp
            d[3 * x] = d[3 * x + 1] = d[3 * x + 2] = static_cast<uint8_t>(i);
          }
        }
      }
      break;
  }
  return out;
}

}  // namespace dgemma::image_detail
