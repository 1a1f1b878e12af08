// JPEG through libjpeg-turbo with the library's defaults (islow IDCT, fancy upsampling), as PIL decodes:
// YCbCr and RGB files give RGB, grayscale is replicated. CMYK / YCCK files are refused (PIL converts them
// with formulas of its own). A file whose data ends before its last pixel is an error, as it is for PIL.
// Progressive files are bounded in memory (the coefficient buffers) and in scans.
//
// libjpeg reports errors by longjmp: the functions that call into it keep only plain data on their frames
// and report failure by their return value; the C++ side throws afterwards.
// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <csetjmp>
#include <vector>

#include "image/decoders.h"
#include "util/error.h"

namespace dgemma::image_detail {
namespace {

constexpr int kMaxScans = 1000;  // a progressive file may not drag the decoder through more scans

struct JpegErrors {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
};

void on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings are ignored, except a premature end of the data: the file is truncated.
void on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) on_error(cinfo);
}

void on_progress(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxScans) {
    auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
    std::snprintf(e->message, sizeof(e->message), "more than %d scans", kMaxScans);
    std::longjmp(e->jump, 1);
  }
}

struct JpegHeader {
  JDIMENSION width = 0, height = 0;
  J_COLOR_SPACE space = JCS_UNKNOWN;
  int components = 0;
};

bool read_header(jpeg_decompress_struct* cinfo, JpegErrors* err, const uint8_t* data, size_t size,
                 JpegHeader* h) {
  if (setjmp(err->jump)) return false;
  jpeg_mem_src(cinfo, const_cast<unsigned char*>(data), static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  h->width = cinfo->image_width;
  h->height = cinfo->image_height;
  h->space = cinfo->jpeg_color_space;
  h->components = cinfo->num_components;
  return true;
}

// Decodes into out (height rows of width * components bytes).
bool read_pixels(jpeg_decompress_struct* cinfo, JpegErrors* err, uint8_t* out, size_t row_bytes) {
  if (setjmp(err->jump)) return false;
  jpeg_start_decompress(cinfo);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = out + static_cast<size_t>(cinfo->output_scanline) * row_bytes;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  // Whatever follows the last scanline (normally just the end marker) is not read: like PIL, a file whose
  // pixels are complete is accepted.
  jpeg_abort_decompress(cinfo);
  return true;
}

struct JpegHandle {
  jpeg_decompress_struct cinfo{};
  bool created = false;
  ~JpegHandle() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

}  // namespace

Image decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  JpegErrors err;
  JpegHandle h;
  h.cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = on_error;
  err.mgr.emit_message = on_message;
  jpeg_create_decompress(&h.cinfo);
  h.created = true;
  jpeg_progress_mgr progress{};
  progress.progress_monitor = on_progress;
  h.cinfo.progress = &progress;

  JpegHeader header;
  if (!read_header(&h.cinfo, &err, bytes.data(), bytes.size(), &header))
    fail_arg("invalid JPEG image: {}", err.message);
  check_dimensions(header.width, header.height, limits, "JPEG");
  int out_components = 3;
  switch (header.space) {
    case JCS_GRAYSCALE:
      h.cinfo.out_color_space = JCS_GRAYSCALE;
      out_components = 1;
      break;
    case JCS_YCbCr:
    case JCS_RGB:
      h.cinfo.out_color_space = JCS_RGB;
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      fail_arg("CMYK JPEG images are not supported");
    default:
      fail_arg("JPEG image with an unsupported color space ({} components)", header.components);
  }
  // Progressive files buffer their coefficients (2 bytes each, up to 3 components): beyond that bound the
  // library fails with "insufficient memory" rather than allocate more.
  h.cinfo.mem->max_memory_to_use = static_cast<long>(8 * limits.max_pixels + (16 << 20));

  const int64_t W = header.width, H = header.height;
  const size_t row_bytes = static_cast<size_t>(W * out_components);
  std::vector<uint8_t> raw(row_bytes * static_cast<size_t>(H));
  if (!read_pixels(&h.cinfo, &err, raw.data(), row_bytes)) fail_arg("invalid JPEG image: {}", err.message);

  Image out;
  out.width = W;
  out.height = H;
  out.channels = 3;
  if (out_components == 3) {
    out.pixels = std::move(raw);
  } else {
    out.pixels.resize(static_cast<size_t>(W * H * 3));
    for (size_t i = 0; i < raw.size(); ++i)
      out.pixels[3 * i] = out.pixels[3 * i + 1] = out.pixels[3 * i + 2] = raw[i];
  }
  return out;
}

}  // namespace dgemma::image_detail
