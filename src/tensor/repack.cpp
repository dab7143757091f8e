#include "tensor/repack.h"

#include <cstring>

#include "common/error.h"
#include "tensor/blocks.h"

namespace k3 {

namespace {

uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Group b[0..8) as block_mxfp4x8. Chunk j < 2 takes low nibbles (elements 8j..8j+7 are qs[8j..8j+7]
// & 15), chunk j >= 2 the high ones of the same bytes; elements 8j + k and 8j + 4 + k share a byte.
block_mxfp4x8 to_lanes(const block_mxfp4* b) {
  block_mxfp4x8 g;
  constexpr uint32_t kLo = 0x0F0F0F0Fu;
  for (int l = 0; l < 8; ++l) {
    const block_mxfp4& x = b[kLaneBlock[l]];
    g.e[l] = x.e;
    for (int j = 0; j < 4; ++j) {
      const uint32_t a = load32(x.qs + 8 * (j % 2)), c = load32(x.qs + 8 * (j % 2) + 4);
      const uint32_t v = j < 2 ? (a & kLo) | (c & kLo) << 4 : (a >> 4 & kLo) | (c & ~kLo);
      std::memcpy(g.qs + 32 * j + 4 * l, &v, 4);
    }
  }
  return g;
}

}  // namespace

GgmlType repacked_type(GgmlType t, int64_t ne0) {
  return t == GgmlType::MXFP4 && ne0 > 0 && ne0 % QK_K == 0 ? GgmlType::MXFP4_LANES : t;
}

void repack_rows(GgmlType t, uint8_t* rows, int64_t nrows, int64_t ne0, size_t stride) {
  if (repacked_type(t, ne0) == t) return;
  K3_ASSERT(t == GgmlType::MXFP4);
  for (int64_t r = 0; r < nrows; ++r) {
    auto* x = reinterpret_cast<block_mxfp4*>(rows + static_cast<size_t>(r) * stride);
    for (int64_t g = 0; g < ne0 / QK_K; ++g) {
      const block_mxfp4x8 lanes = to_lanes(x + 8 * g);
      std::memcpy(static_cast<void*>(x + 8 * g), &lanes, sizeof(lanes));
    }
  }
}

}  // namespace k3
