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

struct Image {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height][width][3]
};

// Default for --image-max-pixels: width × height of an input image.
inline constexpr uint64_t kDefaultMaxPixels = uint64_t{1} << 26;

// Decodes to RGB (alpha composited). `name` is used in messages ("image 'cat.png': ..."); media_type
// ("image/png", "image/jpeg", or empty) must be a supported one, and the bytes decide the format.
// Refuses images with more than max_pixels pixels before decoding them.
Image decode_image(std::span<const uint8_t> bytes, std::string_view media_type, const std::string& name,
                   uint64_t max_pixels = kDefaultMaxPixels);

}  // namespace k3::vision
