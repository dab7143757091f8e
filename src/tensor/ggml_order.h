// ggml's float summation orders as its x86 CPU builds (GCC, W-float vectors) compile them, shared
// by the kernels that mirror them: the F32/F16 dot tails (simd256_common.inc), the KDA conv
// (causal_conv.inc) and the delta rule (delta_rule.inc). File-local in every file that includes it
// (an anonymous namespace): each copy is compiled with its file's ISA flags (kernels_impl.h).
#pragma once
#include <cmath>
#include <cstdint>

namespace k3 {
namespace {
namespace ggml_order {

// How many of the n terms of a `sum += x·y` loop GCC's vectorisation for W-float vectors rounds
// as products and adds one by one (W at a time, then W/2 if that many remain); the rest are fused
// multiply-adds.
constexpr int64_t added(int64_t n, int64_t W) { return n / W * W + (n % W >= W / 2 ? W / 2 : 0); }

// x·y rounded to float, kept apart from the add after it (an opaque copy the compiler cannot fuse).
inline float product(float x, float y) {
  float p = x * y;
  __asm__("" : "+x"(p));
  return p;
}

// head (the reduced accumulators of ggml_vec_dot_f32) plus x(k)·y(k) for k in [i, n), the float
// tail as GCC vectorises it.
template <int64_t W, class X, class Y>
inline float dot_tail(float head, int64_t i, int64_t n, X&& x, Y&& y) {
  const int64_t a = added(n - i, W);
  float s = head;
  for (int64_t k = i; k < n; ++k) s = k - i < a ? s + product(x(k), y(k)) : std::fma(x(k), y(k), s);
  return s;
}
template <int64_t W>
inline float dot_tail(float head, const float* x, const float* y, int64_t i, int64_t n) {
  return dot_tail<W>(head, i, n, [x](int64_t k) { return x[k]; }, [y](int64_t k) { return y[k]; });
}

}  // namespace ggml_order
}  // namespace
}  // namespace k3
