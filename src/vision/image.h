// Image files to 8-bit RGB as Pillow 9.4 gives them (vision.md §4.1): PNG through libspng, JPEG
// through libjpeg-turbo with its defaults. Grey, palette and low bit depths become RGB; alpha
// (an alpha channel or a tRNS key) is composited over the 8 × 8 chessboard. 16-bit samples keep
// their high byte, except 16-bit grey, which Pillow clips to 0..255 (its I -> RGB conversion).
// Every problem (empty, truncated, corrupt, unsupported, too many pixels) is an ImageError whose
// message names the image; the pixel guard is checked from the header, before any decoding.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace k3::vision {

class ImageError : public Error {
 public:
  using Error::Error;
};

enum class ImageFormat : uint8_t { Png, Jpeg };

struct ImageInfo {
  ImageFormat format;
  uint32_t width = 0, height = 0;
  bool alpha = false;  // has an alpha channel or a transparency key (PNG)
};

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height][width][3]
};

// Default for --image-max-pixels: width × height of an input image.
inline constexpr uint64_t kDefaultMaxPixels = uint64_t{1} << 26;

// The format and size from the header. `name` is used in messages ("image 'cat.png': ...");
// media_type ("image/png", "image/jpeg", or empty) is checked to be one of the supported types,
// and the bytes decide the format.
ImageInfo probe_image(std::span<const uint8_t> bytes, std::string_view media_type, const std::string& name);

// Decodes to RGB (alpha composited). Refuses images with more than max_pixels pixels before
// decoding them.
Image decode_image(std::span<const uint8_t> bytes, std::string_view media_type, const std::string& name,
                   uint64_t max_pixels = kDefaultMaxPixels);

// The chessboard composite of one 8-bit sample with alpha a at pixel (x, y) (vision.md §4.1).
inline uint8_t over_chessboard(uint8_t v, uint8_t a, uint32_t x, uint32_t y) {
  const uint32_t bg = ((x / 8 + y / 8) % 2 == 0) ? 255 : 180;
  return static_cast<uint8_t>((a * v + (255 - a) * bg + 127) / 255);
}

}  // namespace k3::vision
