#include "convert/mxfp4_repack.h"

#include <cmath>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace k3::convert {

void mxfp4_repack_group(const uint8_t* p, uint8_t scale, uint8_t* b) {
  b[0] = scale;
#if defined(__SSE2__)
  // Elements 0..15 are the nibbles of p[0..7] (even = low), elements 16..31 those of p[8..15].
  // Interleaving each byte's low and high nibble gives the elements in order; ggml byte j then
  // takes element j (low) and element j + 16 (high).
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8));
  const __m128i lo = _mm_unpacklo_epi8(_mm_and_si128(a, m), _mm_and_si128(_mm_srli_epi16(a, 4), m));  // elements 0..15
  const __m128i hi = _mm_unpacklo_epi8(_mm_and_si128(c, m), _mm_and_si128(_mm_srli_epi16(c, 4), m));  // elements 16..31
  _mm_storeu_si128(reinterpret_cast<__m128i*>(b + 1), _mm_or_si128(lo, _mm_slli_epi16(hi, 4)));
#else
  // Element j is nibble (j & 1) of source byte j / 2; ggml byte j holds elements j and j + 16.
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = (p[j >> 1] >> ((j & 1) * 4)) & 0x0F;        // element j
    const uint8_t hi = (p[8 + (j >> 1)] >> ((j & 1) * 4)) & 0x0F;  // element j + 16
    b[1 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
#endif
}

void mxfp4_repack_rows(const uint8_t* packed, const uint8_t* scales, uint8_t* out, int64_t rows, int64_t cols) {
  const int64_t groups = cols / 32;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g)
      mxfp4_repack_group(packed + (r * groups + g) * 16, scales[r * groups + g], out + (r * groups + g) * 17);
}

void mxfp4_unpack_rows(const uint8_t* blocks, uint8_t* packed, uint8_t* scales, int64_t rows, int64_t cols) {
  const int64_t groups = cols / 32;
  for (int64_t i = 0; i < rows * groups; ++i) {
    const uint8_t* b = blocks + i * 17;
    uint8_t* p = packed + i * 16;
    scales[i] = b[0];
    uint8_t c[32];
    for (int j = 0; j < 16; ++j) {
      c[j] = b[1 + j] & 0x0F;
      c[j + 16] = b[1 + j] >> 4;
    }
    for (int t = 0; t < 16; ++t) p[t] = static_cast<uint8_t>(c[2 * t] | (c[2 * t + 1] << 4));
  }
}

void mxfp4_source_dequant_group(const uint8_t* p, uint8_t scale, float* out) {
  static const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  // 2^(e-127) in double is exact; the product with an E2M1 value is exact in float for every e.
  const double s = std::ldexp(1.0, static_cast<int>(scale) - 127);
  for (int e = 0; e < 32; ++e) {
    const uint8_t code = (p[e / 2] >> ((e & 1) * 4)) & 0x0F;
    const double mag = e2m1[code & 7] * s;
    out[e] = static_cast<float>((code & 8) ? -mag : mag);
  }
}

}  // namespace k3::convert
