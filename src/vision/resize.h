// Pillow's Image.resize(size, Image.BICUBIC) on 8-bit RGB, byte for byte (vision.md §4.3):
// separable, horizontal pass first, a pass skipped when its size is unchanged; cubic kernel with
// a = -0.5, support 2·max(1, in/out); weights normalised in double, then 22-bit fixed point;
// integer accumulation, rounding offset 2^21, shift and clamp to 0..255 after each pass.
#pragma once
#include <cstdint>

#include "tensor/threadpool.h"
#include "vision/image.h"

namespace k3::vision {

// A copy of `in` when the size already matches. Rows are shared out over the pool if given.
Image resize_bicubic(const Image& in, uint32_t width, uint32_t height, ThreadPool* pool = nullptr);

}  // namespace k3::vision
