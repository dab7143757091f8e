// Rows of blocks that go through a type's codebook and code space whole (docs/formats.md), for the
// exhaustive tests of the dequantizers (test_quant_ref.cpp) and of every SIMD form (test_kernels.cpp):
// IQ3_XXS every grid index under every 7-bit sign field and every scale code, IQ3_S every 9-bit
// index under every sign byte and scale code, NVFP4 every UE4M3 scale byte with every code, Q1_0,
// Q2_0, TQ1_0 and TQ2_0 every byte value at every byte position. d: the f16 bits of the block scale.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/types.h"

namespace k3::test {

inline const GgmlType kCodebookTypes[] = {GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::NVFP4, GgmlType::Q1_0,
                                          GgmlType::Q2_0,    GgmlType::TQ1_0, GgmlType::TQ2_0};

inline std::vector<uint8_t> codebook_blocks(GgmlType t, uint16_t d) {
  std::vector<uint8_t> v;
  auto put = [&](std::vector<uint8_t> b, int d_at) {
    if (d_at >= 0) std::memcpy(&b[d_at], &d, 2);
    v.insert(v.end(), b.begin(), b.end());
  };
  switch (t) {
    case GgmlType::IQ3_XXS:
      for (int s7 = 0; s7 < 128; ++s7)
        for (int part = 0; part < 4; ++part) {  // indices 64·part .. 64·part + 63
          std::vector<uint8_t> b(98);
          for (int i = 0; i < 64; ++i) b[2 + i] = static_cast<uint8_t>(64 * part + i);
          for (int sb = 0; sb < 8; ++sb) {
            const uint32_t sas = static_cast<uint32_t>(s7) * 0x204081u | static_cast<uint32_t>((2 * part + sb / 4 + 3 * s7) % 16) << 28;
            std::memcpy(&b[66 + 4 * sb], &sas, 4);
          }
          put(b, 0);
        }
      break;
    case GgmlType::IQ3_S:
      for (int sign = 0; sign < 256; ++sign)
        for (int part = 0; part < 8; ++part) {
          std::vector<uint8_t> b(110, 0);
          for (int i = 0; i < 64; ++i) b[2 + i] = static_cast<uint8_t>(64 * (part % 4) + i);
          for (int sb = 0; sb < 8; ++sb) b[66 + sb] = part >= 4 ? 0xFF : 0;
          for (int i = 0; i < 32; ++i) b[74 + i] = static_cast<uint8_t>(sign + i);
          for (int i = 0; i < 4; ++i) b[106 + i] = static_cast<uint8_t>(sign * 7 + part + 17 * i);
          put(b, 0);
        }
      break;
    case GgmlType::NVFP4:
      for (int s = 0; s < 256; ++s) {
        std::vector<uint8_t> b(36);
        for (int k = 0; k < 4; ++k) b[k] = static_cast<uint8_t>(s);
        for (int i = 0; i < 32; ++i) b[4 + i] = static_cast<uint8_t>((i + s) % 16 | (15 - i % 16) << 4);
        put(b, -1);
      }
      break;
    default: {  // Q1_0, Q2_0, TQ1_0, TQ2_0
      const TypeInfo& ti = type_info(t);
      const int d_at = t == GgmlType::TQ1_0 ? 52 : t == GgmlType::TQ2_0 ? 64 : 0;
      for (int value = 0; value < 256; ++value) put(std::vector<uint8_t>(ti.block_bytes, static_cast<uint8_t>(value)), d_at);
    }
  }
  return v;
}

}  // namespace k3::test
