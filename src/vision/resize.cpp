#include "vision/resize.h"

#include <cmath>

namespace k3::vision {

namespace {

constexpr int kPrecision = 22;  // fraction bits of the fixed-point weights (32 - 8 - 2)

double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0) x = -x;
  if (x < 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return (((x - 5) * x + 8) * x - 4) * a;
  return 0;
}

// The taps of one pass: for output i, source samples first[i] .. first[i] + count[i] - 1 with
// weights w[i * ksize + j].
struct Taps {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> w;
};

Taps taps(int in, int out) {
  const double scale = static_cast<double>(in) / out;
  const double filterscale = scale < 1 ? 1 : scale;
  const double support = 2 * filterscale;
  Taps t;
  t.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(out), t.count.resize(out);
  t.w.assign(static_cast<size_t>(out) * t.ksize, 0);
  std::vector<double> k(t.ksize);
  const double ss = 1.0 / filterscale;
  for (int i = 0; i < out; ++i) {
    const double center = (i + 0.5) * scale;
    int lo = static_cast<int>(center - support + 0.5);
    if (lo < 0) lo = 0;
    int hi = static_cast<int>(center + support + 0.5);
    if (hi > in) hi = in;
    const int n = hi - lo;
    double sum = 0;
    for (int j = 0; j < n; ++j) sum += k[j] = bicubic((j + lo - center + 0.5) * ss);
    for (int j = 0; j < n; ++j) {
      const double v = sum != 0 ? k[j] / sum : k[j];
      t.w[static_cast<size_t>(i) * t.ksize + j] =
          static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecision) : 0.5 + v * (1 << kPrecision));
    }
    t.first[i] = lo, t.count[i] = n;
  }
  return t;
}

uint8_t clip8(int32_t v) {
  v >>= kPrecision;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

void for_rows(ThreadPool* pool, int64_t n, FnRef<void(int64_t, int64_t)> fn) {
  if (pool && pool->size() > 1 && n > 1) pool->parallel_for(n, fn);
  else fn(0, n);
}

// Rows y0 .. y0 + rows - 1 of `in`, resampled along x to width out_w.
Image horizontal(const Image& in, uint32_t out_w, uint32_t y0, uint32_t rows, ThreadPool* pool) {
  const Taps t = taps(static_cast<int>(in.width), static_cast<int>(out_w));
  Image o;
  o.width = out_w, o.height = rows;
  o.rgb.resize(static_cast<size_t>(out_w) * rows * 3);
  for_rows(pool, rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* src = in.rgb.data() + (y0 + r) * in.width * 3;
      uint8_t* dst = o.rgb.data() + r * out_w * 3;
      for (uint32_t x = 0; x < out_w; ++x) {
        const int32_t* k = t.w.data() + static_cast<size_t>(x) * t.ksize;
        const uint8_t* s = src + static_cast<size_t>(t.first[x]) * 3;
        int32_t a0 = 1 << (kPrecision - 1), a1 = a0, a2 = a0;
        for (int j = 0; j < t.count[x]; ++j) {
          a0 += s[3 * j] * k[j];
          a1 += s[3 * j + 1] * k[j];
          a2 += s[3 * j + 2] * k[j];
        }
        dst[3 * x] = clip8(a0), dst[3 * x + 1] = clip8(a1), dst[3 * x + 2] = clip8(a2);
      }
    }
  });
  return o;
}

// Resampled along y to out_h, where `in` holds source rows from `y0` on.
Image vertical(const Image& in, const Taps& t, uint32_t out_h, uint32_t y0, ThreadPool* pool) {
  const size_t stride = static_cast<size_t>(in.width) * 3;
  Image o;
  o.width = in.width, o.height = out_h;
  o.rgb.resize(stride * out_h);
  for_rows(pool, out_h, [&](int64_t r0, int64_t r1) {
    for (int64_t y = r0; y < r1; ++y) {
      const int32_t* k = t.w.data() + static_cast<size_t>(y) * t.ksize;
      const uint8_t* s = in.rgb.data() + (t.first[y] - y0) * stride;
      uint8_t* dst = o.rgb.data() + y * stride;
      for (size_t i = 0; i < stride; ++i) {
        int32_t a = 1 << (kPrecision - 1);
        for (int j = 0; j < t.count[y]; ++j) a += s[j * stride + i] * k[j];
        dst[i] = clip8(a);
      }
    }
  });
  return o;
}

}  // namespace

Image resize_bicubic(const Image& in, uint32_t width, uint32_t height, ThreadPool* pool) {
  if (width == in.width && height == in.height) return in;
  const bool need_h = width != in.width, need_v = height != in.height;
  if (!need_v) return horizontal(in, width, 0, in.height, pool);
  const Taps tv = taps(static_cast<int>(in.height), static_cast<int>(height));
  if (!need_h) return vertical(in, tv, height, 0, pool);
  // Only the source rows the vertical pass reads go through the horizontal one.
  const uint32_t first = static_cast<uint32_t>(tv.first.front());
  const uint32_t last = static_cast<uint32_t>(tv.first.back() + tv.count.back());
  return vertical(horizontal(in, width, first, last - first, pool), tv, height, first, pool);
}

}  // namespace k3::vision
