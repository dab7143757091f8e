// The MoonViT encoder and the patch-merger projector (vision.md §5–§6), all float32:
//   x = patches · Wpatchᵀ + resize(pos_table)
//   27 × { x += attn(rope2d(rmsnorm(x)·Wqkv)) · Wout;  x += gelu_tanh(rmsnorm(x)·Wup) · Wdown }
//   x = rmsnorm(x, post_ln);  m = 2 × 2 merge(x);  e = rmsnorm(gelu_erf(m·W1)·W2, post_norm)
// Matrices through matmul_f32 (any stored type, float32 activations), attention blocked
// (attention.h), everything spread over the pool. An Encoder owns its activations and reuses
// them: an image needs no allocation beyond what an image of its size needed before.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tensor/threadpool.h"
#include "vision/image.h"
#include "vision/model.h"
#include "vision/preprocess.h"

namespace k3::vision {

// One encoded image: the rows that replace its <|media_pad|> token.
struct ImageRows {
  Geometry geometry;
  int64_t n_tokens = 0, n_embd = 0;
  std::vector<float> rows;  // [n_tokens][n_embd]
  std::string hash;         // XXH3-128 of the rows' bytes (hex): what a prompt-cache key holds for the image
  // <|media_begin|>image WxH<|media_content|><|media_pad|><|media_end|> (original size, vision.md §7)
  std::string prompt() const;
};

// Named intermediates for parity work: (name, block or -1, data, rows, cols).
using Dump = std::function<void(const char*, int, const float*, int64_t, int64_t)>;

struct EncodeOptions {
  uint32_t max_tokens = 0;     // rows per image (0: only the model's patch limit)
  Image* resized = nullptr;    // receives the resized pixels (before padding) if set
  Dump dump;
};

class Encoder {
 public:
  explicit Encoder(const VisionModel& m) : m_(m) {}
  ImageRows encode(const Image& img, ThreadPool& pool, const EncodeOptions& o = {});

  // Floating-point operations of one image with this grid (matrices and attention; for benchmarks).
  static double flops(const VisionHParams& hp, const Geometry& g);

 private:
  const VisionModel& m_;
  // activations, kept between images
  std::vector<float> patches_, x_, xn_, qkv_, kt_, att_, hid_, tmp_, merged_, proj_, cs_;
};

}  // namespace k3::vision
