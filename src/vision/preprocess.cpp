#include "vision/preprocess.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace k3::vision {

namespace {

constexpr double kMaxSide = 7168;  // pixels (vision.md §4.2)

void fit(Geometry& g, double limit, uint32_t patch) {
  const double pw = std::max<uint32_t>(1, g.width / patch), ph = std::max<uint32_t>(1, g.height / patch);
  const double s = std::min({1.0, std::sqrt(limit / (pw * ph)), kMaxSide / g.width, kMaxSide / g.height});
  g.rw = std::max<uint32_t>(1, static_cast<uint32_t>(std::floor(g.width * s)));
  g.rh = std::max<uint32_t>(1, static_cast<uint32_t>(std::floor(g.height * s)));
}

}  // namespace

Geometry plan_geometry(uint32_t width, uint32_t height, const VisionHParams& hp, uint32_t max_tokens) {
  K3_ASSERT(width > 0 && height > 0);
  Geometry g;
  g.width = width, g.height = height;
  const uint32_t cell = hp.patch * hp.merge;
  auto cells = [&] { return int64_t{(g.rw + cell - 1) / cell} * ((g.rh + cell - 1) / cell); };
  double limit = hp.in_patch_limit;
  if (max_tokens > 0) limit = std::min(limit, 4.0 * max_tokens);
  fit(g, limit, hp.patch);
  // Padding (and the one-patch floor of a thin image) can leave more cells than limit / 4: shrink
  // the limit until the tokens fit (a 1 x 1 image is one cell).
  while (max_tokens > 0 && cells() > max_tokens) {
    limit *= 0.95 * max_tokens / static_cast<double>(cells());
    fit(g, limit, hp.patch);
  }
  g.grid_w = (g.rw + cell - 1) / cell * hp.merge;
  g.grid_h = (g.rh + cell - 1) / cell * hp.merge;
  return g;
}

void patchify(const Image& im, const Geometry& g, const VisionHParams& hp, std::vector<float>& patches) {
  K3_ASSERT(im.width == g.rw && im.height == g.rh);
  const uint32_t p = hp.patch, row = 3 * p * p;
  // v -> (v/255 - mean)/std as float32, for the 256 byte values and the black padding.
  float lut[3][256];
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) lut[c][v] = (static_cast<float>(v) / 255.0f - hp.mean[c]) / hp.std[c];
  patches.resize(static_cast<size_t>(g.n_patches()) * row);
  for (uint32_t r = 0; r < g.grid_h; ++r)
    for (uint32_t c = 0; c < g.grid_w; ++c) {
      float* out = patches.data() + (static_cast<size_t>(r) * g.grid_w + c) * row;
      for (uint32_t ch = 0; ch < 3; ++ch)
        for (uint32_t ky = 0; ky < p; ++ky)
          for (uint32_t kx = 0; kx < p; ++kx) {
            const uint32_t y = r * p + ky, x = c * p + kx;
            const uint8_t v = (y < im.height && x < im.width) ? im.rgb[(static_cast<size_t>(y) * im.width + x) * 3 + ch] : 0;
            *out++ = lut[ch][v];
          }
    }
}

}  // namespace k3::vision
