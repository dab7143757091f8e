#include "vision/image.h"

#include <jpeglib.h>
#include <jerror.h>
#include <spng.h>

#include <csetjmp>
#include <cstring>
#include <memory>

namespace k3::vision {

namespace {

enum class ImageFormat : uint8_t { Png, Jpeg };

// The chessboard composite of one 8-bit sample with alpha a at pixel (x, y) (vision.md §4.1).
uint8_t over_chessboard(uint8_t v, uint8_t a, uint32_t x, uint32_t y) {
  const uint32_t bg = ((x / 8 + y / 8) % 2 == 0) ? 255 : 180;
  return static_cast<uint8_t>((a * v + (255 - a) * bg + 127) / 255);
}

[[noreturn]] void bad(const std::string& name, const std::string& why) {
  throw ImageError("image '" + name + "': " + why);
}

bool starts_with(std::span<const uint8_t> b, std::initializer_list<uint8_t> magic) {
  if (b.size() < magic.size()) return false;
  size_t i = 0;
  for (uint8_t m : magic)
    if (b[i++] != m) return false;
  return true;
}

ImageFormat sniff(std::span<const uint8_t> b, std::string_view media_type, const std::string& name) {
  if (!media_type.empty() && media_type != "image/png" && media_type != "image/jpeg" && media_type != "image/jpg")
    bad(name, "media type '" + std::string(media_type) + "' is not supported (image/png and image/jpeg are)");
  if (b.empty()) bad(name, "empty (0 bytes)");
  if (starts_with(b, {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A})) return ImageFormat::Png;
  if (starts_with(b, {0xFF, 0xD8, 0xFF})) return ImageFormat::Jpeg;
  const char* other = starts_with(b, {'G', 'I', 'F', '8'})   ? "a GIF image"
                      : starts_with(b, {'R', 'I', 'F', 'F'}) ? "a RIFF (WebP?) file"
                      : starts_with(b, {'B', 'M'})           ? "a BMP image"
                                                             : "neither PNG nor JPEG data";
  bad(name, strprintf("%s (%zu bytes); only PNG and JPEG images are supported", other, b.size()));
}

void check_pixels(uint32_t w, uint32_t h, uint64_t max_pixels, const std::string& name) {
  if (w == 0 || h == 0) bad(name, strprintf("zero-sized (%u x %u)", w, h));
  const uint64_t n = uint64_t{w} * h;
  if (n > max_pixels)
    bad(name, strprintf("%u x %u = %llu pixels, more than the limit of %llu (--image-max-pixels)", w, h,
                        static_cast<unsigned long long>(n), static_cast<unsigned long long>(max_pixels)));
}

// ---- PNG (libspng) ----

struct SpngFree {
  void operator()(spng_ctx* c) const { spng_ctx_free(c); }
};
using Spng = std::unique_ptr<spng_ctx, SpngFree>;

Spng open_png(std::span<const uint8_t> b, const std::string& name, spng_ihdr& ihdr) {
  Spng ctx(spng_ctx_new(0));
  if (!ctx) throw std::bad_alloc();
  int e = spng_set_png_buffer(ctx.get(), b.data(), b.size());
  if (!e) e = spng_get_ihdr(ctx.get(), &ihdr);
  if (e) bad(name, std::string("not a readable PNG: ") + spng_strerror(e));
  return ctx;
}

bool png_has_trns(spng_ctx* ctx) {
  spng_trns t;
  return spng_get_trns(ctx, &t) == 0;
}

Image decode_png(std::span<const uint8_t> b, const std::string& name, uint64_t max_pixels) {
  spng_ihdr ihdr{};
  Spng ctx = open_png(b, name, ihdr);
  check_pixels(ihdr.width, ihdr.height, max_pixels, name);
  const bool wide = ihdr.bit_depth == 16;
  const int fmt = wide ? SPNG_FMT_RGBA16 : SPNG_FMT_RGBA8;
  size_t len = 0;
  int e = spng_decoded_image_size(ctx.get(), fmt, &len);
  std::vector<uint8_t> buf;
  if (!e) {
    buf.resize(len);
    e = spng_decode_image(ctx.get(), buf.data(), len, fmt, SPNG_DECODE_TRNS);
  }
  if (e) bad(name, std::string("corrupt or truncated PNG: ") + spng_strerror(e));

  const bool alpha = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA ||
                     ihdr.color_type == SPNG_COLOR_TYPE_TRUECOLOR_ALPHA || png_has_trns(ctx.get());
  // Pillow opens 16-bit grey as 32-bit integers and clips them to 0..255 on conversion; every other
  // 16-bit sample keeps its high byte.
  const bool clip16 = wide && ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE;
  Image im;
  im.width = ihdr.width, im.height = ihdr.height;
  im.rgb.resize(static_cast<size_t>(im.width) * im.height * 3);
  for (uint32_t y = 0; y < im.height; ++y)
    for (uint32_t x = 0; x < im.width; ++x) {
      const size_t i = static_cast<size_t>(y) * im.width + x;
      uint8_t px[4];
      if (wide) {
        uint16_t s[4];
        std::memcpy(s, buf.data() + 8 * i, 8);  // host order
        for (int c = 0; c < 4; ++c) px[c] = clip16 && c < 3 ? static_cast<uint8_t>(s[c] > 255 ? 255 : s[c]) : s[c] >> 8;
      } else {
        std::memcpy(px, buf.data() + 4 * i, 4);
      }
      for (int c = 0; c < 3; ++c) im.rgb[3 * i + c] = alpha ? over_chessboard(px[c], px[3], x, y) : px[c];
    }
  return im;
}

// ---- JPEG (libjpeg-turbo) ----

struct JpegErr {
  jpeg_error_mgr pub;
  std::jmp_buf jb;
  char msg[JMSG_LENGTH_MAX] = {};
  bool eof = false;
};

void jpeg_on_error(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErr*>(c->err);
  c->err->format_message(c, e->msg);
  std::longjmp(e->jb, 1);
}

// Warnings are ignored as Pillow ignores them, except running out of data: Pillow refuses a
// truncated file.
void jpeg_on_message(j_common_ptr c, int level) {
  if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) reinterpret_cast<JpegErr*>(c->err)->eof = true;
}

constexpr const char* kTruncated = "truncated JPEG (the data ends before the image does)";

struct JpegJob {
  std::span<const uint8_t> bytes;
  uint64_t max_pixels = 0;
  uint32_t width = 0, height = 0;
  bool cmyk = false;
  std::vector<uint8_t> pixels;  // [h][w][3 or 4]
  std::string error;            // set when run_jpeg() returns false
};

// Everything that the error longjmp can skip lives in the caller's JpegJob.
bool run_jpeg(JpegJob& job) {
  jpeg_decompress_struct cinfo;
  JpegErr err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = jpeg_on_error;
  err.pub.emit_message = jpeg_on_message;
  if (setjmp(err.jb)) {
    job.error = std::string("corrupt JPEG: ") + err.msg + (err.eof ? " (the data ended early)" : "");
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, job.bytes.data(), static_cast<unsigned long>(job.bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  job.width = cinfo.image_width, job.height = cinfo.image_height;
  job.cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  if (err.eof) {
    job.error = kTruncated;
  } else if (job.width > 0 && job.height > 0 && uint64_t{job.width} * job.height <= job.max_pixels) {  // else: refused from the header
    cinfo.out_color_space = job.cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&cinfo);
    const size_t stride = static_cast<size_t>(cinfo.output_width) * cinfo.output_components;
    job.pixels.resize(stride * cinfo.output_height);
    while (cinfo.output_scanline < cinfo.output_height) {
      JSAMPROW row = job.pixels.data() + stride * cinfo.output_scanline;
      jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    if (err.eof) job.error = kTruncated;
  }
  jpeg_destroy_decompress(&cinfo);
  return job.error.empty();
}

// Pillow's CMYK -> RGB: libjpeg gives Adobe's inverted samples (Pillow's "CMYK;I" raw mode), then
// each channel is nk - nk·c/255 with Pillow's rounded division.
uint8_t cmyk_channel(uint8_t raw_c, uint8_t raw_k) {
  const int c = 255 - raw_c, nk = raw_k;
  const int t = c * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

Image decode_jpeg(std::span<const uint8_t> b, const std::string& name, uint64_t max_pixels) {
  JpegJob job;
  job.bytes = b;
  job.max_pixels = max_pixels;
  if (!run_jpeg(job)) bad(name, job.error);
  check_pixels(job.width, job.height, max_pixels, name);
  Image im;
  im.width = job.width, im.height = job.height;
  const size_t n = static_cast<size_t>(im.width) * im.height;
  if (!job.cmyk) {
    im.rgb = std::move(job.pixels);
    return im;
  }
  im.rgb.resize(3 * n);
  for (size_t i = 0; i < n; ++i)
    for (int c = 0; c < 3; ++c) im.rgb[3 * i + c] = cmyk_channel(job.pixels[4 * i + c], job.pixels[4 * i + 3]);
  return im;
}

}  // namespace

Image decode_image(std::span<const uint8_t> bytes, std::string_view media_type, const std::string& name,
                   uint64_t max_pixels) {
  return sniff(bytes, media_type, name) == ImageFormat::Png ? decode_png(bytes, name, max_pixels)
                                                            : decode_jpeg(bytes, name, max_pixels);
}

}  // namespace k3::vision
