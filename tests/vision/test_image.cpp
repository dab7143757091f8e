// Image decoding (vision/image.h) on files written here with libspng's and libjpeg's encoders:
// pixels, the chessboard composite, and a clear error naming the image for every bad input
// (empty, another format, truncated, corrupt, zero-sized, too many pixels), checked from the header
// before any decoding. Data URLs (vision.h). Pillow parity of the pixels is tests/vision/parity.py.
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <spng.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "vision/image.h"
#include "vision/vision.h"

namespace k3::vision {
namespace {

using Bytes = std::vector<uint8_t>;

Bytes png(uint32_t w, uint32_t h, uint8_t color_type, const Bytes& pixels) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{w, h, 8, color_type, 0, 0, 0};
  spng_set_ihdr(ctx, &ihdr);
  EXPECT_EQ(spng_encode_image(ctx, pixels.data(), pixels.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), 0);
  size_t len = 0;
  int err = 0;
  auto* buf = static_cast<uint8_t*>(spng_get_png_buffer(ctx, &len, &err));
  Bytes out(buf, buf + len);
  std::free(buf);
  spng_ctx_free(ctx);
  return out;
}

Bytes jpeg(uint32_t w, uint32_t h, const Bytes& rgb) {
  jpeg_compress_struct c;
  jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  unsigned char* mem = nullptr;
  unsigned long len = 0;
  jpeg_mem_dest(&c, &mem, &len);
  c.image_width = w, c.image_height = h, c.input_components = 3, c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < h) {
    JSAMPROW row = const_cast<uint8_t*>(rgb.data()) + c.next_scanline * w * 3;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  Bytes out(mem, mem + len);
  jpeg_destroy_compress(&c);
  std::free(mem);
  return out;
}

Bytes gradient(uint32_t w, uint32_t h, int channels) {
  Bytes p(static_cast<size_t>(w) * h * channels);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>((i * 7) % 251);
  return p;
}

// The error message of decode_image, or "" if it decoded.
std::string error_of(const Bytes& b, std::string_view media = "", uint64_t max_pixels = kDefaultMaxPixels) {
  try {
    decode_image(b, media, "test-image", max_pixels);
  } catch (const ImageError& e) {
    return e.what();
  }
  return "";
}

void expect_error(const Bytes& b, const std::string& part, std::string_view media = "", uint64_t max_pixels = kDefaultMaxPixels) {
  const std::string msg = error_of(b, media, max_pixels);
  EXPECT_NE(msg.find("image 'test-image'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(part), std::string::npos) << msg;
}

TEST(VisionImage, PngRgbAndGrey) {
  const Bytes rgb = gradient(37, 11, 3);
  Image im = decode_image(png(37, 11, SPNG_COLOR_TYPE_TRUECOLOR, rgb), "image/png", "x");
  EXPECT_EQ(im.width, 37u);
  EXPECT_EQ(im.height, 11u);
  EXPECT_EQ(im.rgb, rgb);
  const Bytes g = gradient(5, 4, 1);
  im = decode_image(png(5, 4, SPNG_COLOR_TYPE_GRAYSCALE, g), "", "x");
  for (size_t i = 0; i < g.size(); ++i)
    for (int c = 0; c < 3; ++c) ASSERT_EQ(im.rgb[3 * i + c], g[i]);
}

TEST(VisionImage, AlphaOverChessboard) {
  const uint32_t w = 20, h = 10;
  Bytes rgba(w * h * 4);
  for (uint32_t i = 0; i < w * h; ++i) {
    rgba[4 * i] = 200, rgba[4 * i + 1] = 10, rgba[4 * i + 2] = 99;
    rgba[4 * i + 3] = static_cast<uint8_t>(i % 3 == 0 ? 0 : i % 3 == 1 ? 255 : 128);
  }
  const Image im = decode_image(png(w, h, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, rgba), "", "x");
  for (uint32_t y = 0; y < h; ++y)
    for (uint32_t x = 0; x < w; ++x) {
      const uint32_t i = y * w + x;
      const int bg = ((x / 8 + y / 8) % 2 == 0) ? 255 : 180;
      const int a = rgba[4 * i + 3];
      for (int c = 0; c < 3; ++c) ASSERT_EQ(im.rgb[3 * i + c], (a * rgba[4 * i + c] + (255 - a) * bg + 127) / 255) << x << "," << y;
    }
  EXPECT_EQ(im.rgb[0], 255);            // (0, 0): alpha 0 over white
  EXPECT_EQ(im.rgb[3 * 9], 180);        // (9, 0): alpha 0 over the grey square
}

TEST(VisionImage, Jpeg) {
  const Bytes rgb(24 * 16 * 3, 128);
  const Image im = decode_image(jpeg(24, 16, rgb), "image/jpeg", "x");
  EXPECT_EQ(im.width, 24u);
  EXPECT_EQ(im.height, 16u);
  for (uint8_t v : im.rgb) ASSERT_NEAR(v, 128, 1);
}

TEST(VisionImage, BadInputsNameTheImage) {
  const Bytes p = png(40, 30, SPNG_COLOR_TYPE_TRUECOLOR, gradient(40, 30, 3));
  const Bytes j = jpeg(40, 30, gradient(40, 30, 3));
  expect_error({}, "empty");
  expect_error({'G', 'I', 'F', '8', '9', 'a', 0, 0}, "a GIF image (8 bytes); only PNG and JPEG images are supported");
  expect_error({'h', 'e', 'l', 'l', 'o'}, "neither PNG nor JPEG");
  expect_error(p, "media type 'image/gif' is not supported", "image/gif");
  expect_error(Bytes(p.begin(), p.begin() + p.size() / 2), "PNG");
  expect_error(Bytes(p.begin(), p.begin() + 20), "PNG");
  Bytes crc = p;
  crc[crc.size() - 20] ^= 0x55;  // inside the IDAT data: its CRC no longer matches
  expect_error(crc, "PNG");
  expect_error(Bytes(j.begin(), j.begin() + j.size() / 2), "truncated JPEG");
  expect_error(Bytes(j.begin(), j.begin() + 40), "(the data ended early)");
  Bytes garbage = j;
  for (size_t i = 4; i < 40; ++i) garbage[i] = 0x11;
  expect_error(garbage, "corrupt JPEG");
}

TEST(VisionImage, ZeroSizedAndTooManyPixels) {
  // A PNG header that claims 100000 x 100000 pixels: refused from the header, nothing decoded.
  Bytes p = png(3, 2, SPNG_COLOR_TYPE_TRUECOLOR, gradient(3, 2, 3));
  auto set_ihdr = [](Bytes b, uint32_t w, uint32_t h) {
    for (int i = 0; i < 4; ++i) b[16 + i] = static_cast<uint8_t>(w >> (24 - 8 * i)), b[20 + i] = static_cast<uint8_t>(h >> (24 - 8 * i));
    uint32_t crc = 0xFFFFFFFFu;  // CRC-32 of "IHDR" + its 13 bytes
    for (size_t i = 12; i < 29; ++i) {
      crc ^= b[i];
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1)));
    }
    crc ^= 0xFFFFFFFFu;
    for (int i = 0; i < 4; ++i) b[29 + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
    return b;
  };
  expect_error(set_ihdr(p, 100000, 100000), "10000000000 pixels, more than the limit of 67108864");
  expect_error(p, "6 pixels, more than the limit of 5", "", 5);
  expect_error(set_ihdr(p, 0, 2), "PNG");
  const Bytes j = jpeg(40, 30, gradient(40, 30, 3));
  expect_error(j, "40 x 30 = 1200 pixels, more than the limit of 1000", "", 1000);
}

TEST(VisionImage, DataUrls) {
  const DataUrl d = parse_data_url("data:image/png;base64,iVBORw0KGgo=", "part 0");
  EXPECT_EQ(d.media_type, "image/png");
  EXPECT_EQ(d.bytes, (Bytes{0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A}));
  EXPECT_EQ(parse_data_url("data:image/jpeg;base64,/9j/", "p").bytes, (Bytes{0xFF, 0xD8, 0xFF}));
  auto err = [](const std::string& url) {
    try {
      parse_data_url(url, "messages[0].content[1]");
    } catch (const ImageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err("https://example.com/cat.png").find("remote image URLs are not supported"), std::string::npos);
  EXPECT_NE(err("HTTP://example.com/cat.png").find("remote"), std::string::npos);
  EXPECT_NE(err("data:image/png;base64,iVBO!!Kgo=").find("broken base64"), std::string::npos);
  EXPECT_NE(err("data:image/png;base64,iVBORw0KG").find("broken base64"), std::string::npos);
  EXPECT_NE(err("data:image/png;base64,iV=BO").find("broken base64"), std::string::npos);
  EXPECT_NE(err("data:image/png,rawbytes").find("not base64"), std::string::npos);
  EXPECT_NE(err("data:image/gif;base64,R0lG").find("image/gif"), std::string::npos);
  EXPECT_NE(err("file:///etc/passwd").find("not a data URL"), std::string::npos);
  EXPECT_NE(err("https://x").find("messages[0].content[1]"), std::string::npos);
}

}  // namespace
}  // namespace k3::vision
