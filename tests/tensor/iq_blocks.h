// Rows of the lattice types (IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M) that name every grid entry under
// every sign pattern (IQ2: 128 parity-completed codes, IQ2_S: 256 bytes) or shift sign (IQ1), and
// every scale code, written field by field from the layouts of docs/formats.md; for the exhaustive
// dequantizer and kernel tests. Header-only.
#pragma once
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "tensor/blocks.h"
#include "tensor/types.h"

namespace k3::test {

// Grid entries, sign patterns per group of 8 and scale codes of each lattice type.
struct IqShape {
  int grid, patterns, codes, unit;  // unit: values per scale (IQ1_S: also per shift)
};
inline IqShape iq_shape(GgmlType t) {
  switch (t) {
    case GgmlType::IQ2_XXS: return {256, 128, 16, 32};
    case GgmlType::IQ2_XS: return {512, 128, 16, 16};
    case GgmlType::IQ2_S: return {1024, 256, 16, 16};
    case GgmlType::IQ1_S: return {2048, 2, 8, 32};
    default: return {2048, 2, 8, 16};  // IQ1_M
  }
}

namespace iqb {
inline void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline uint16_t get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void or16(uint8_t* p, uint32_t bits) { put16(p, static_cast<uint16_t>(get16(p) | bits)); }
inline void or32(uint8_t* p, uint32_t bits) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  v |= bits;
  std::memcpy(p, &v, 4);
}

// Group g (0-31) of block b names grid entry k with pattern p (IQ2: sign code; IQ1: shift sign).
inline void set_group(GgmlType t, uint8_t* b, int g, int k, int p) {
  switch (t) {
    case GgmlType::IQ2_XXS:
      b[2 + 8 * (g / 4) + g % 4] = static_cast<uint8_t>(k);
      or32(b + 2 + 8 * (g / 4) + 4, static_cast<uint32_t>(p) << (7 * (g % 4)));
      break;
    case GgmlType::IQ2_XS: put16(b + 2 + 2 * g, static_cast<uint16_t>(k | p << 9)); break;
    case GgmlType::IQ2_S:
      b[2 + g] = static_cast<uint8_t>(k & 255);
      b[66 + g / 4] = static_cast<uint8_t>(b[66 + g / 4] | (k >> 8) << (2 * (g % 4)));
      b[34 + g] = static_cast<uint8_t>(p);
      break;
    case GgmlType::IQ1_S:  // the shift sign is per 32 values: the caller gives their groups one p
      b[2 + g] = static_cast<uint8_t>(k & 255);
      or16(b + 34 + 2 * (g / 4), static_cast<uint32_t>(k >> 8) << (3 * (g % 4)) | static_cast<uint32_t>(p) << 15);
      break;
    default:  // IQ1_M
      b[g] = static_cast<uint8_t>(k & 255);
      b[32 + g / 2] = static_cast<uint8_t>(b[32 + g / 2] | ((k >> 8) | p << 3) << (4 * (g % 2)));
      break;
  }
}

// Scale code c of scale unit u of block b.
inline void set_scale(GgmlType t, uint8_t* b, int u, int c) {
  switch (t) {
    case GgmlType::IQ2_XXS: or32(b + 2 + 8 * u + 4, static_cast<uint32_t>(c) << 28); break;
    case GgmlType::IQ2_XS: b[66 + u / 2] = static_cast<uint8_t>(b[66 + u / 2] | c << (4 * (u % 2))); break;
    case GgmlType::IQ2_S: b[74 + u / 2] = static_cast<uint8_t>(b[74 + u / 2] | c << (4 * (u % 2))); break;
    case GgmlType::IQ1_S: or16(b + 34 + 2 * u, static_cast<uint32_t>(c) << 12); break;
    default: or16(b + 48 + 2 * (u / 4), static_cast<uint32_t>(c) << (3 * (u % 4))); break;
  }
}

// The f16 super-block scale (IQ1_M: the top nibbles of its four scale words).
inline void set_d(GgmlType t, uint8_t* b, uint16_t d) {
  if (t != GgmlType::IQ1_M) return put16(b, d);
  for (int w = 0; w < 4; ++w) or16(b + 48 + 2 * w, static_cast<uint32_t>((d >> (4 * w)) & 15) << 12);
}
}  // namespace iqb

// Every (grid entry, pattern) pair once, in blocks of 32 groups; scale unit u takes code u % codes;
// block i's scale is d(i). Groups go in (pattern, entry) order, so the 4 groups of an IQ1_S
// 32-value unit share their shift sign.
inline std::vector<uint8_t> iq_exhaustive_blocks(GgmlType t, const std::function<uint16_t(int64_t)>& d) {
  const IqShape s = iq_shape(t);
  const size_t bb = type_info(t).block_bytes;
  const int64_t groups = static_cast<int64_t>(s.grid) * s.patterns, blocks = groups / 32;
  std::vector<uint8_t> v(bb * blocks, 0);
  for (int64_t q = 0; q < groups; ++q) iqb::set_group(t, v.data() + bb * (q / 32), static_cast<int>(q % 32), static_cast<int>(q % s.grid), static_cast<int>(q / s.grid));
  const int units = QK_K / s.unit;
  for (int64_t i = 0; i < blocks; ++i) {
    for (int u = 0; u < units; ++u) iqb::set_scale(t, v.data() + bb * i, u, static_cast<int>((i * units + u) % s.codes));
    iqb::set_d(t, v.data() + bb * i, d(i));
  }
  return v;
}

}  // namespace k3::test
