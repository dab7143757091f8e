// Byte layouts of the quantized block types (quant-formats.md §4-§8, §10). All little-endian;
// f16 fields are raw IEEE binary16 bits.
#pragma once
#include <bit>
#include <cstdint>

namespace k3 {

constexpr int QK = 32;    // legacy / MXFP4 / IQ4_NL block
constexpr int QK_K = 256;  // K-quant super-block

// The 32-element block dots (Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4) sum their block terms in 8 lanes:
// lane l takes block 8g + kLaneBlock[l] of group g, the order in which two rounds of pairwise
// sums over the 256-bit kernels' pair vectors leave the block totals (dot_ref.cpp's lane_sum,
// simd256_block32.inc).
constexpr int kLaneBlock[8] = {0, 2, 4, 6, 1, 3, 5, 7};
constexpr int kBlockLane[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // its inverse

#pragma pack(push, 1)
struct block_q4_0 { uint16_t d; uint8_t qs[QK / 2]; };
struct block_q4_1 { uint16_t d; uint16_t m; uint8_t qs[QK / 2]; };
struct block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; };
struct block_q5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[QK / 2]; };
struct block_q8_0 { uint16_t d; int8_t qs[QK]; };
struct block_q8_1 { uint16_t d; uint16_t s; int8_t qs[QK]; };
struct block_mxfp4 { uint8_t e; uint8_t qs[QK / 2]; };
struct block_iq4_nl { uint16_t d; uint8_t qs[QK / 2]; };

struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d; uint16_t dmin; };
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; };
struct block_q4_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; };
struct block_q5_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };
struct block_iq4_xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };

// MXFP4_LANES (types.h): 8 MXFP4 blocks b = 0..7 laid out for 256-bit kernels whose int32 lane l
// sums block kLaneBlock[l] (the lane order of the block sums above), so that a group's block totals
// need no horizontal sums. f[l]: the exponent e of block kLaneBlock[l] less one, the f32 exponent
// field of its half scale 2^(e - 128), so the kernels widen and shift it (e >= 2: blocks with the
// subnormal scales of e = 0, 1 are not repacked, tensor/repack.h). qs: 4 chunks of 32 bytes; byte
// 4l + k of chunk j holds elements 8j + k (low nibble) and 8j + 4 + k (high nibble) of that block.
// The same 136 bytes as the 8 blocks.
struct block_mxfp4x8 { uint8_t f[8]; uint8_t qs[4 * 32]; };
// Q8_0_X8: 8 consecutive Q8_0 blocks, their scales first: d[k] and qs[32k..32k+31] are block k's,
// so that one load gives a group's 8 scales (the same 272 bytes as the 8 blocks).
struct block_q8_0x8 { uint16_t d[8]; int8_t qs[8 * 32]; };
#pragma pack(pop)
// Code of element i (0..31) of lane l's block.
inline constexpr uint8_t mxfp4x8_code(const block_mxfp4x8& x, int l, int i) {
  const uint8_t b = x.qs[32 * (i / 8) + 4 * l + i % 4];
  return i % 8 < 4 ? b & 15 : b >> 4;
}
// Half scale of lane l's block (e8m0_to_fp32_half of its exponent).
inline constexpr float mxfp4x8_half_scale(const block_mxfp4x8& x, int l) {
  return std::bit_cast<float>(static_cast<uint32_t>(x.f[l]) << 23);
}

static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20 && sizeof(block_q5_0) == 22 &&
              sizeof(block_q5_1) == 24 && sizeof(block_q8_0) == 34 && sizeof(block_q8_1) == 36 &&
              sizeof(block_mxfp4) == 17 && sizeof(block_iq4_nl) == 18);
static_assert(sizeof(block_q2_K) == 84 && sizeof(block_q3_K) == 110 && sizeof(block_q4_K) == 144 &&
              sizeof(block_q5_K) == 176 && sizeof(block_q6_K) == 210 && sizeof(block_q8_K) == 292 &&
              sizeof(block_iq4_xs) == 136 && sizeof(block_mxfp4x8) == 8 * sizeof(block_mxfp4) &&
              sizeof(block_q8_0x8) == 8 * sizeof(block_q8_0));

// E2M1 values doubled (ggml's kvalues_mxfp4) and the IQ4_NL codebook.
inline constexpr int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

}  // namespace k3
