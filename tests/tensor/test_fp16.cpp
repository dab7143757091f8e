// fp16.h against ggml's row conversions and the IEEE / spec formulas (quant-formats.md §2, §7).
// f16 -> f32 is exhaustive; f32 -> f16 / bf16 sweep a dense sample of all 2^32 inputs (every
// sign, exponent and mantissa above bit 5, with edge-case low bits), or all of them with
// K3_EXHAUSTIVE=1 (about 30 s).
#include <cpuid.h>
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "ggml_ref.h"
#include "tensor/fp16.h"

namespace {

using k3::bits_f32;
using k3::f32_bits;
using k3::test::GgmlRef;

#define REQUIRE_GGML(g)              \
  const GgmlRef* g = GgmlRef::get(); \
  ASSERT_NE(g, nullptr) << GgmlRef::load_error()

// binary16 decoded by its definition: (-1)^s * 2^(e-15) * 1.m, subnormals 2^-14 * 0.m;
// NaNs quieted with the payload kept (ggml's software conversion).
uint32_t f16_expected(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const int e = (h >> 10) & 31, m = h & 1023;
  if (e == 31) return sign | 0x7F800000u | (m ? 0x400000u | static_cast<uint32_t>(m) << 13 : 0);
  const double mag = e ? std::ldexp(1024 + m, e - 25) : std::ldexp(m, -24);
  return sign | f32_bits(static_cast<float>(mag));
}

// Input i of a sweep of 2^32 / stride inputs: i*stride plus low bits picked by a hash of i from
// the sticky-bit edge patterns, so exact halves and half +- 1 ulp occur at every exponent.
uint32_t sweep_input(uint64_t i, uint32_t stride) {
  static const uint32_t low[4] = {0, 1, 31, 16};
  return static_cast<uint32_t>(i * stride) + (stride > 1 ? low[(static_cast<uint32_t>(i) * 2654435761u) >> 30] : 0);
}
uint32_t sweep_stride() { return std::getenv("K3_EXHAUSTIVE") ? 1 : 32; }

// Not NaN: the bf16 nearest by value (ties to the even mantissa), decided in double; above the
// largest finite bf16 the next value up is 2^128, i.e. inf.
uint16_t nearest_bf16(float f) {
  const uint32_t lo = f32_bits(f) >> 16;  // truncated toward zero
  const double v = f, vlo = bits_f32(lo << 16);
  const float fhi = bits_f32((lo + 1) << 16);  // next bf16 away from zero
  const double vhi = std::isinf(fhi) ? std::copysign(std::ldexp(1.0, 128), v) : fhi;
  const double dlo = std::fabs(v - vlo), dhi = std::fabs(vhi - v);
  return static_cast<uint16_t>(lo + ((dhi < dlo || (dhi == dlo && (lo & 1))) ? 1 : 0));
}

bool cpu_has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);  // CPUID.1:ECX.F16C
}

// The CPU's own IEEE round-to-nearest-even conversion (F16C), a second oracle for non-NaN inputs.
__attribute__((target("avx,f16c"))) void f16c_row(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

TEST(Fp16, ToF32AllInputs) {
  REQUIRE_GGML(g);
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> ref(65536);
  g->fp16_to_fp32_row(h.data(), ref.data(), 65536);
  int bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint32_t got = f32_bits(k3::fp16_to_fp32(h[i]));
    if (got != f32_bits(ref[i]) || got != f16_expected(h[i])) {
      if (++bad <= 5)
        ADD_FAILURE() << std::hex << "f16 " << i << ": k3 " << got << " ggml " << f32_bits(ref[i]) << " spec "
                      << f16_expected(h[i]);
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(f32_bits(k3::fp16_to_fp32(0x7C01)), 0x7FC02000u);  // signaling NaN comes back quiet
  EXPECT_EQ(f32_bits(k3::fp16_to_fp32(0x8001)), 0xB3800000u);  // -2^-24
}

TEST(Fp16, FromF32Sweep) {
  REQUIRE_GGML(g);
  const uint32_t stride = sweep_stride();
  const bool f16c = cpu_has_f16c();
  const int64_t chunk = 1 << 16;
  std::vector<float> x(chunk);
  std::vector<uint16_t> ref(chunk), hw(chunk);
  uint64_t bad = 0, tested = 0;
  for (uint64_t base = 0; base < (uint64_t{1} << 32) / stride; base += chunk) {
    for (int64_t i = 0; i < chunk; ++i) x[i] = bits_f32(sweep_input(base + i, stride));
    g->fp32_to_fp16_row(x.data(), ref.data(), chunk);
    if (f16c) f16c_row(x.data(), hw.data(), chunk);
    for (int64_t i = 0; i < chunk; ++i) {
      const uint16_t got = k3::fp32_to_fp16(x[i]);
      const bool nan = std::isnan(x[i]);
      // Every NaN -> 0x7E00 with its sign; otherwise IEEE RNE as the hardware does it.
      const bool ok =
          got == ref[i] && (nan ? got == ((f32_bits(x[i]) >> 16 & 0x8000) | 0x7E00) : !f16c || got == hw[i]);
      if (!ok && ++bad <= 5)
        ADD_FAILURE() << std::hex << "f32 " << f32_bits(x[i]) << ": k3 " << got << " ggml " << ref[i] << " f16c "
                      << hw[i];
    }
    tested += chunk;
  }
  EXPECT_EQ(bad, 0u) << "of " << tested;
  // Named edge cases: largest finite, overflow, smallest subnormal, ties at a subnormal result.
  EXPECT_EQ(k3::fp32_to_fp16(65504.f), 0x7BFF);
  EXPECT_EQ(k3::fp32_to_fp16(65520.f), 0x7C00);  // exactly halfway to 2^16: ties to even -> inf
  EXPECT_EQ(k3::fp32_to_fp16(std::ldexp(1.f, -24)), 0x0001);
  EXPECT_EQ(k3::fp32_to_fp16(std::ldexp(1.f, -25)), 0x0000);                // tie -> even 0
  EXPECT_EQ(k3::fp32_to_fp16(std::ldexp(3.f, -25)), 0x0002);                // 1.5 ulp -> 2
  EXPECT_EQ(k3::fp32_to_fp16(-std::ldexp(1.f, -25) * 1.0000001f), 0x8001);  // just above the tie
  EXPECT_EQ(k3::fp32_to_fp16(bits_f32(0xFF800001u)), 0xFE00);
}

TEST(Bf16, FromF32Sweep) {
  REQUIRE_GGML(g);
  const uint32_t stride = sweep_stride();
  const int64_t chunk = 1 << 16;
  std::vector<float> x(chunk);
  std::vector<uint16_t> ref(chunk);
  uint64_t bad = 0, tested = 0;
  for (uint64_t base = 0; base < (uint64_t{1} << 32) / stride; base += chunk) {
    for (int64_t i = 0; i < chunk; ++i) x[i] = bits_f32(sweep_input(base + i, stride));
    g->fp32_to_bf16_row(x.data(), ref.data(), chunk);
    for (int64_t i = 0; i < chunk; ++i) {
      const uint16_t got = k3::fp32_to_bf16(x[i]);
      const uint32_t u = f32_bits(x[i]);
      const bool ok = got == ref[i] && got == (std::isnan(x[i]) ? ((u >> 16) | 0x40) : nearest_bf16(x[i]));
      if (!ok && ++bad <= 5)
        ADD_FAILURE() << std::hex << "f32 " << f32_bits(x[i]) << ": k3 " << got << " ggml " << ref[i];
    }
    tested += chunk;
  }
  EXPECT_EQ(bad, 0u) << "of " << tested;
}

TEST(Bf16, ToF32AllInputs) {
  REQUIRE_GGML(g);
  std::vector<uint16_t> h(65536);
  for (uint32_t i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  std::vector<float> ref(65536);
  g->bf16_to_fp32_row(h.data(), ref.data(), 65536);
  int bad = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint32_t got = f32_bits(k3::bf16_to_fp32(h[i]));
    bad += got != i << 16 || got != f32_bits(ref[i]);
  }
  EXPECT_EQ(bad, 0);
}

// E8M0 (§7): 2^(e-127), and half of it, for all 256 exponents; e = 255 gives +inf unhalved.
TEST(E8m0, AllExponents) {
  for (int e = 0; e < 256; ++e) {
    const uint8_t b = static_cast<uint8_t>(e);
    EXPECT_EQ(k3::e8m0_to_fp32(b), static_cast<float>(std::ldexp(1.0, e - 127))) << e;
    EXPECT_EQ(k3::e8m0_to_fp32_half(b), static_cast<float>(std::ldexp(1.0, e - 128))) << e;
  }
  EXPECT_TRUE(std::isinf(k3::e8m0_to_fp32(255)));
  EXPECT_EQ(f32_bits(k3::e8m0_to_fp32(0)), 0x00400000u);
}

}  // namespace
