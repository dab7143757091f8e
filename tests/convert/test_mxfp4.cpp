// The MXFP4 repack (conversion.md §4): the dequantized values of the compressed-tensors source and
// of the ggml block (k3's reference dequantizer) are bit-identical for every nibble value and every
// scale exponent, and on random blocks; the repack is a bijection (unpack inverts it). The one
// exception is inherent to ggml's format: E2M1 code 8 is −0 in the source, and ggml's table holds
// +0 for it (kvalues[8] = 0), so −0.0 comes back as +0.0 (equal as values, sign of zero lost).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "convert/mxfp4_repack.h"
#include "tensor/blocks.h"
#include "tensor/quant_ref.h"

using namespace k3;
using namespace k3::convert;

namespace {
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
// The source value as ggml can hold it: −0 (code 8) becomes +0; everything else bit for bit.
uint32_t ggml_bits(float src) { return bits(src) == 0x80000000u ? 0u : bits(src); }

void check_group(const uint8_t* packed, uint8_t scale) {
  uint8_t block[17];
  mxfp4_repack_group(packed, scale, block);
  ASSERT_EQ(block[0], scale);
  float src[32], dst[32];
  mxfp4_source_dequant_group(packed, scale, src);
  ref::dequantize_row(GgmlType::MXFP4, block, dst, 32);
  for (int i = 0; i < 32; ++i) ASSERT_EQ(ggml_bits(src[i]), bits(dst[i])) << "element " << i << " scale " << int(scale);
  uint8_t back[16], sc;
  mxfp4_unpack_rows(block, back, &sc, 1, 32);
  ASSERT_EQ(sc, scale);
  ASSERT_EQ(std::memcmp(back, packed, 16), 0);
}
}  // namespace

TEST(ConvertMxfp4Repack, EveryNibbleAtEveryPositionAndScale) {
  // For each of the 256 scale bytes: every code at every one of the 32 positions (others vary).
  for (int e = 0; e < 256; ++e)
    for (int code = 0; code < 16; ++code)
      for (int pos = 0; pos < 32; ++pos) {
        uint8_t p[16];
        for (int t = 0; t < 16; ++t) {
          const uint8_t lo = (2 * t == pos) ? code : static_cast<uint8_t>((2 * t + code + e) & 15);
          const uint8_t hi = (2 * t + 1 == pos) ? code : static_cast<uint8_t>((2 * t + 1 + 3 * code) & 15);
          p[t] = static_cast<uint8_t>(lo | (hi << 4));
        }
        check_group(p, static_cast<uint8_t>(e));
      }
}

TEST(ConvertMxfp4Repack, EveryByteValueInEverySlot) {
  for (int e : {0, 1, 2, 126, 127, 128, 254, 255})
    for (int v = 0; v < 256; ++v)
      for (int slot = 0; slot < 16; ++slot) {
        uint8_t p[16] = {};
        p[slot] = static_cast<uint8_t>(v);
        check_group(p, static_cast<uint8_t>(e));
      }
}

TEST(ConvertMxfp4Repack, RandomRows) {
  std::mt19937_64 rng(42);
  const int64_t rows = 37, cols = 32 * 23;
  std::vector<uint8_t> packed(rows * cols / 2), scales(rows * cols / 32), out(rows * (cols / 32) * 17);
  for (int iter = 0; iter < 20; ++iter) {
    for (auto& b : packed) b = static_cast<uint8_t>(rng());
    for (auto& s : scales) s = static_cast<uint8_t>(rng());
    mxfp4_repack_rows(packed.data(), scales.data(), out.data(), rows, cols);
    std::vector<float> src(cols), dst(cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < cols / 32; ++g)
        mxfp4_source_dequant_group(&packed[(r * cols + g * 32) / 2], scales[r * cols / 32 + g], &src[g * 32]);
      ref::dequantize_row(GgmlType::MXFP4, &out[r * (cols / 32) * 17], dst.data(), cols);
      for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(ggml_bits(src[i]), bits(dst[i])) << "row " << r << " col " << i;
    }
    std::vector<uint8_t> p2(packed.size()), s2(scales.size());
    mxfp4_unpack_rows(out.data(), p2.data(), s2.data(), rows, cols);
    ASSERT_EQ(p2, packed);
    ASSERT_EQ(s2, scales);
  }
}

TEST(ConvertMxfp4Repack, ReferenceExampleValues) {
  // conversion.md §4.1: low nibble = even element; value = ±E2M1 · 2^(e-127).
  uint8_t p[16] = {};
  p[0] = 0x2F;  // element 0 = code 15 (-6), element 1 = code 2 (1.0)
  float v[32];
  mxfp4_source_dequant_group(p, 126, v);  // scale 0.5
  EXPECT_EQ(v[0], -3.0f);
  EXPECT_EQ(v[1], 0.5f);
  uint8_t b[17];
  mxfp4_repack_group(p, 126, b);
  EXPECT_EQ(b[1] & 0x0F, 15);  // element 0 -> qs[0] low
  EXPECT_EQ(b[1] >> 4, 0);     // element 16 -> qs[0] high
  EXPECT_EQ(b[2] & 0x0F, 2);   // element 1 -> qs[1] low
}
