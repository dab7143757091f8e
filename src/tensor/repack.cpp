#include "tensor/repack.h"

#include <cstring>

#include "common/error.h"
#include "tensor/blocks.h"
#include "tensor/kernels.h"

namespace k3 {

namespace {

uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Group b[0..8) as block_mxfp4x8. Chunk j < 2 takes low nibbles (elements 8j..8j+7 are qs[8j..8j+7]
// & 15), chunk j >= 2 the high ones of the same bytes; elements 8j + k and 8j + 4 + k share a byte.
block_mxfp4x8 group8(const block_mxfp4* b) {
  block_mxfp4x8 g;
  constexpr uint32_t kLo = 0x0F0F0F0Fu;
  for (int l = 0; l < 8; ++l) {
    const block_mxfp4& x = b[kLaneBlock[l]];
    K3_ASSERT(x.e >= 2);
    g.f[l] = static_cast<uint8_t>(x.e - 1);
    for (int j = 0; j < 4; ++j) {
      const uint32_t a = load32(x.qs + 8 * (j % 2)), c = load32(x.qs + 8 * (j % 2) + 4);
      const uint32_t v = j < 2 ? (a & kLo) | (c & kLo) << 4 : (a >> 4 & kLo) | (c & ~kLo);
      std::memcpy(g.qs + 32 * j + 4 * l, &v, 4);
    }
  }
  return g;
}

block_q8_0x8 group8(const block_q8_0* b) {
  block_q8_0x8 g;
  for (int k = 0; k < 8; ++k) {
    g.d[k] = b[k].d;
    std::memcpy(g.qs + QK * k, b[k].qs, QK);
  }
  return g;
}

// A Q4_K super-block in the lanes layout (blocks.h), the scales and mins taken from ggml's 6-bit packing.
block_q4_Kl lanes(const block_q4_K& x) {
  block_q4_Kl y{};
  y.d = x.d, y.dmin = x.dmin;
  for (int l = 0; l < 8; ++l) {
    int sc, m;
    q4k_scale_min(x.scales, l, sc, m);
    y.sc[l] = static_cast<uint8_t>(l < 4 ? sc | (m & 3) << 6 : sc << 2 | m >> 4);
    y.mlo[l % 4] = static_cast<uint8_t>(y.mlo[l % 4] | (l < 4 ? m >> 2 : (m & 15) << 4));
    // element i of sub-block l: nibble l % 2 of byte 32(l / 2) + i; 4 elements a word
    constexpr uint32_t kLo = 0x0F0F0F0Fu;
    const uint8_t* q = x.qs + 32 * (l / 2);
    for (int v = 0; v < 4; ++v) {
      const uint32_t a = load32(q + 4 * v) >> (4 * (l % 2)) & kLo, b = load32(q + 16 + 4 * v) >> (4 * (l % 2)) & kLo;
      const uint32_t w = a | b << 4;
      std::memcpy(y.qs + 32 * v + 4 * l, &w, 4);
    }
  }
  return y;
}

void relayout_q4_K(uint8_t* rows, int64_t nrows, int64_t ne0, size_t stride) {
  for (int64_t r = 0; r < nrows; ++r) {
    auto* x = reinterpret_cast<block_q4_K*>(rows + static_cast<size_t>(r) * stride);
    for (int64_t i = 0; i < ne0 / QK_K; ++i) {
      const block_q4_Kl y = lanes(x[i]);
      std::memcpy(static_cast<void*>(x + i), &y, sizeof(y));
    }
  }
}

// Each group of 8 blocks of every row, in place.
template <class Block>
void regroup(uint8_t* rows, int64_t nrows, int64_t ne0, size_t stride) {
  for (int64_t r = 0; r < nrows; ++r) {
    auto* x = reinterpret_cast<Block*>(rows + static_cast<size_t>(r) * stride);
    for (int64_t g = 0; g < ne0 / QK_K; ++g) {
      const auto grouped = group8(x + 8 * g);
      static_assert(sizeof(grouped) == 8 * sizeof(Block));
      std::memcpy(static_cast<void*>(x + 8 * g), &grouped, sizeof(grouped));
    }
  }
}

}  // namespace

GgmlType repacked_type(GgmlType t, int64_t ne0, int64_t ne1) {
  if (ne0 <= 0 || ne0 % QK_K != 0) return t;
  if (t == GgmlType::MXFP4) return GgmlType::MXFP4_LANES;
  if (t == GgmlType::Q8_0) return GgmlType::Q8_0_X8;
  if (t == GgmlType::Q4_K) return GgmlType::Q4_K_LANES;
  if (t == GgmlType::Q2_K && ne1 % 8 == 0 && active_isa() == Isa::Avx512) return GgmlType::Q2_K_SB;
  return t;
}

bool repackable(GgmlType t, const uint8_t* rows, int64_t nrows, int64_t ne0, size_t stride) {
  if (t != GgmlType::MXFP4 || ne0 % QK_K != 0) return true;
  for (int64_t r = 0; r < nrows; ++r) {
    const auto* x = reinterpret_cast<const block_mxfp4*>(rows + static_cast<size_t>(r) * stride);
    for (int64_t i = 0; i < ne0 / QK; ++i)
      if (x[i].e < 2) return false;
  }
  return true;
}

void repack_rows(GgmlType t, uint8_t* rows, int64_t nrows, int64_t ne0, size_t stride) {
  if (ne0 % QK_K != 0) return;
  if (t == GgmlType::MXFP4) return regroup<block_mxfp4>(rows, nrows, ne0, stride);
  if (t == GgmlType::Q8_0) return regroup<block_q8_0>(rows, nrows, ne0, stride);
  if (t == GgmlType::Q4_K) return relayout_q4_K(rows, nrows, ne0, stride);
}

}  // namespace k3
