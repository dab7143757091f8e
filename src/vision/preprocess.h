// From a decoded image to the encoder's input (vision.md §4.2–§4.5): the target size under the
// patch limit, the Pillow resize, black padding to whole merge cells and the per-channel
// normalisation, laid out as one row of 3·p·p values per patch.
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/threadpool.h"
#include "vision/hparams.h"
#include "vision/image.h"

namespace k3::vision {

struct Geometry {
  uint32_t width = 0, height = 0;    // original
  uint32_t rw = 0, rh = 0;           // resized (before padding)
  uint32_t grid_h = 0, grid_w = 0;   // patches of the padded image
  int64_t n_patches() const { return int64_t{grid_h} * grid_w; }
  int64_t n_tokens(uint32_t merge) const { return n_patches() / (merge * merge); }
};

// Images are never enlarged; max_tokens (0: no limit) lowers the patch limit until the padded
// image has at most that many merged tokens.
Geometry plan_geometry(uint32_t width, uint32_t height, const VisionHParams& hp, uint32_t max_tokens = 0);

// patches: [n_patches][3·p·p] normalised values, row-major patches of the padded image, each
// row in (channel, y, x) order (the patch kernel's order). `resized` is the image after resize.
void patchify(const Image& resized, const Geometry& g, const VisionHParams& hp, std::vector<float>& patches);

}  // namespace k3::vision
