// What frontends use (k3 run, chat, serve, encode-image; the Anthropic/Responses routes): an mmproj
// with its encoder and thread pool, turning image bytes into the rows of a prompt. Shareable
// between threads: encodes run one at a time on the vision pool.
//
//   vision::Vision v(mmproj_path, {max_pixels, max_tokens, threads});
//   v.check_text_width(model.hparams().n_embd, model_path);
//   auto img = v.encode(bytes, "image/png", "part 2");   // ImageError (400) for a bad image
//   template input image_prompts += img->prompt(); after tokenizing: expand_media_pads (prompt.h)
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/threadpool.h"
#include "vision/encoder.h"
#include "vision/image.h"
#include "vision/model.h"

namespace k3::vision {

struct VisionOptions {
  uint64_t max_pixels = kDefaultMaxPixels;  // --image-max-pixels: width × height of an input image
  uint32_t max_tokens = 0;                  // --image-max-tokens: rows per image (0: the mmproj's patch limit)
  int threads = 1;
};

class Vision {
 public:
  Vision(const std::string& mmproj_path, const VisionOptions& o);
  const VisionModel& model() const { return *m_; }
  const VisionOptions& options() const { return o_; }

  // Throws k3::Error naming both files unless the projector's width is the text model's.
  void check_text_width(int64_t n_embd, const std::string& model_path) const;

  // bytes of a PNG or JPEG file (media_type "image/png", "image/jpeg" or "" to sniff) -> rows.
  // ImageError for a bad image, its message naming `name`. resized: the pixels before padding;
  // dump: the named intermediates (encoder.h).
  std::shared_ptr<const ImageRows> encode(std::span<const uint8_t> bytes, std::string_view media_type,
                                          const std::string& name, Image* resized = nullptr, const Dump& dump = {});

 private:
  std::unique_ptr<VisionModel> m_;
  VisionOptions o_;
  std::mutex mu_;
  std::unique_ptr<ThreadPool> pool_;
  Encoder enc_;
};

// The bytes of an image file (ImageError naming the path if it cannot be read).
std::vector<uint8_t> read_image_file(const std::string& path);

// "data:image/png;base64,...." -> media type and bytes. ImageError naming `name` for anything else
// (remote URLs included: k3 fetches nothing) or for broken base64.
struct DataUrl {
  std::string media_type;
  std::vector<uint8_t> bytes;
};
DataUrl parse_data_url(std::string_view url, const std::string& name);

}  // namespace k3::vision
