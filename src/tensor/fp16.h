// Exact scalar conversions between f32, f16, bf16 and E8M0 (quant-formats.md §2, §7).
#pragma once
#include <cstdint>
#include <cstring>

namespace k3 {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// IEEE binary16 -> binary32, exact; signaling NaNs come back quiet as in ggml.
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F;
  const uint32_t man = h & 0x3FF;
  if (exp == 0x1F) return bits_f32(sign | 0x7F800000 | (man << 13) | (man ? 0x400000 : 0));
  if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
  if (man == 0) return bits_f32(sign);
  // subnormal: value = man * 2^-24, exact in f32
  float v = static_cast<float>(man) * bits_f32(0x33800000);  // 2^-24
  return bits_f32(sign | f32_bits(v));
}

// binary32 -> binary16, round to nearest even; overflow -> inf; NaN -> 0x7E00 with sign.
inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7FFFFFFF;
  if (ax > 0x7F800000) return sign | 0x7E00;
  if (ax >= 0x477FF000) return sign | 0x7C00;  // rounds to >= 65536 -> inf
  if (ax < 0x38800000) {                       // below the smallest f16 normal (2^-14)
    if (ax < 0x33000000) return sign;          // below half the smallest subnormal (2^-25)
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e;  // so that m >> shift is in units of 2^-24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = ax - 0x38000000;  // rebias exponent 127 -> 15
  r = (r + 0xFFF + ((r >> 13) & 1)) >> 13;
  return sign | static_cast<uint16_t>(r);
}

inline float bf16_to_fp32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFF) > 0x7F800000) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

// E8M0 scale as ggml decodes it for MXFP4: half of 2^(e-127).
inline float e8m0_to_fp32_half(uint8_t e) {
  return e < 2 ? bits_f32(0x00200000u << e) : bits_f32(static_cast<uint32_t>(e - 1) << 23);
}
inline float e8m0_to_fp32(uint8_t e) {
  return e == 0 ? bits_f32(0x00400000u) : bits_f32(static_cast<uint32_t>(e) << 23);
}

// UE4M3 (NVFP4's sub-block scale: 4 exponent bits, bias 7, 3 mantissa bits, no sign) as ggml
// decodes it: half the value (the E2M1 codes are doubled), 0x7F (the NaN pattern) as 0, bit 7 ignored.
inline float ue4m3_to_fp32_half(uint8_t x) {
  if ((x & 0x7F) == 0 || x == 0x7F) return 0.0f;
  const int e = (x >> 3) & 15, m = x & 7;
  // exponent 0: m·2^-9, halved; else (8 + m)·2^(e - 10), halved
  return e == 0 ? static_cast<float>(m) * 0x1p-10f : bits_f32(static_cast<uint32_t>(e + 119) << 23 | static_cast<uint32_t>(m) << 20);
}

}  // namespace k3
