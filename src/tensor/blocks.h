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
// The lattice types (quant-formats.md §8, docs/formats.md): 8-value groups name an entry of a grid
// (tensor/iq_grids.h) plus signs (IQ2) or a shift (IQ1).
// IQ2_XXS: per 32 values two u32: 4 grid-index bytes, then 4 x 7 sign bits and a 4-bit scale (top).
struct block_iq2_xxs { uint16_t d; uint16_t qs[QK_K / 8]; };
// IQ2_XS: per 8 values a u16 (9-bit grid index, 7 sign bits); per 16 values a 4-bit scale.
struct block_iq2_xs { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; };
// IQ2_S: qs[0..31] low 8 index bits, qs[32..63] sign bytes, qh 2 high index bits per 8 values.
struct block_iq2_s { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; };
// IQ1_S: qs low 8 index bits; qh per 32 values: 3 high index bits per 8 values (bits 0-11), a 3-bit
// scale (bits 12-14) and the shift's sign (bit 15).
struct block_iq1_s { uint16_t d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; };
// IQ1_M: qh per 16 values: 3 high index bits and a shift sign per 8; scales: four u16 holding
// 3-bit scales per 16 values, their top nibbles the f16 super-block scale.
struct block_iq1_m { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; };

// docs/formats.md: the 1-, 2-bit, ternary, NVFP4 and IQ3 types.
constexpr int QK1_0 = 128, QK2_0 = 64, QK_NVFP4 = 64;
struct block_q1_0 { uint16_t d; uint8_t qs[QK1_0 / 8]; };
struct block_q2_0 { uint16_t d; uint8_t qs[QK2_0 / 4]; };
struct block_nvfp4 { uint8_t d[QK_NVFP4 / 16]; uint8_t qs[QK_NVFP4 / 2]; };
struct block_tq1_0 { uint8_t qs[48]; uint8_t qh[4]; uint16_t d; };
struct block_tq2_0 { uint8_t qs[QK_K / 4]; uint16_t d; };
struct block_iq3_xxs { uint16_t d; uint8_t qs[3 * QK_K / 8]; };
struct block_iq3_s { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t signs[QK_K / 8]; uint8_t scales[QK_K / 64]; };

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
// Q4_K_LANES: a Q4_K super-block laid out for 256-bit kernels whose int32 lane l sums sub-block l
// (32 elements). qs: 4 vectors of 32 bytes; byte 4l + j of vector v holds element 4v + j (low
// nibble) and 16 + 4v + j (high nibble) of sub-block l, so the low nibbles of vector v and the high
// ones are chunks v and v + 4 of every sub-block. The 6-bit scales and mins in the 12 bytes after
// d and dmin so that every one is 6 contiguous bits of 2 header bytes, read by one byte shuffle, one
// shift and one mask (gemm_q4k_lanes.inc): for j < 4, sc[j] = scale_j | (min_j & 3) << 6 and
// sc[j + 4] = scale_{j+4} << 2 | min_{j+4} >> 4; mlo[j] = min_j >> 2 | (min_{j+4} & 15) << 4. So
// min_j is bits 6-11 of the pair (sc[j], mlo[j]) and min_{j+4} bits 4-9 of (mlo[j], sc[j+4]).
// The same 144 bytes as the Q4_K block.
struct block_q4_Kl { uint16_t d; uint16_t dmin; uint8_t sc[8]; uint8_t mlo[4]; uint8_t qs[QK_K / 2]; };
#pragma pack(pop)
// Scale and min of sub-block j of a Q4_K / Q5_K super-block (ggml's 6-bit packing).
inline constexpr void q4k_scale_min(const uint8_t* scales, int j, int& sc, int& m) {
  if (j < 4) {
    sc = scales[j] & 63;
    m = scales[j + 4] & 63;
  } else {
    sc = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4);
    m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}
inline constexpr int q4kl_scale(const block_q4_Kl& x, int l) { return l < 4 ? x.sc[l] & 63 : x.sc[l] >> 2; }
inline constexpr int q4kl_min(const block_q4_Kl& x, int l) {
  return l < 4 ? (x.sc[l] >> 6 | x.mlo[l] << 2) & 63 : (x.mlo[l - 4] >> 4 | x.sc[l] << 4) & 63;
}
// Code of element i (0..31) of sub-block l.
inline constexpr int q4kl_code(const block_q4_Kl& x, int l, int i) {
  const uint8_t b = x.qs[32 * (i / 4 % 4) + 4 * l + i % 4];
  return i < 16 ? b & 15 : b >> 4;
}
// Code of element i (0..31) of lane l's block.
inline constexpr uint8_t mxfp4x8_code(const block_mxfp4x8& x, int l, int i) {
  const uint8_t b = x.qs[32 * (i / 8) + 4 * l + i % 4];
  return i % 8 < 4 ? b & 15 : b >> 4;
}
// Half scale of lane l's block (e8m0_to_fp32_half of its exponent).
inline constexpr float mxfp4x8_half_scale(const block_mxfp4x8& x, int l) {
  return std::bit_cast<float>(static_cast<uint32_t>(x.f[l]) << 23);
}
// Stored codes (value + 1) of element j: Q2_0 four to a byte, low bits first; TQ2_0 element 32c + m
// of half h in bits 2(c % 4) of qs[32h + m] (Q2_K's order); TQ1_0 base-3 digits, qs[0..31] holding
// elements 32k + m (digit k of byte m), qs[32..47] elements 160 + 16k + m, qh[0..3] 240 + 4k + m
// (docs/formats.md).
inline constexpr int q2_0_code(const block_q2_0& x, int j) { return (x.qs[j / 4] >> (2 * (j % 4))) & 3; }
inline constexpr int tq2_0_code(const block_tq2_0& x, int e) { return (x.qs[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3; }
// Digit k of a TQ1_0 byte: multiplied by 3^k modulo 256 it is the top digit, and ·3 >> 8 reads it.
inline constexpr int tq1_0_digit(uint8_t b, int k) {
  constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  return (static_cast<uint8_t>(b * kPow3[k]) * 3) >> 8;
}
inline constexpr int tq1_0_code(const block_tq1_0& x, int e) {
  if (e < 160) return tq1_0_digit(x.qs[e % 32], e / 32);
  if (e < 240) return tq1_0_digit(x.qs[32 + (e - 160) % 16], (e - 160) / 16);
  return tq1_0_digit(x.qh[(e - 240) % 4], (e - 240) / 4);
}

static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20 && sizeof(block_q5_0) == 22 &&
              sizeof(block_q5_1) == 24 && sizeof(block_q8_0) == 34 && sizeof(block_q8_1) == 36 &&
              sizeof(block_mxfp4) == 17 && sizeof(block_iq4_nl) == 18);
static_assert(sizeof(block_q2_K) == 84 && sizeof(block_q3_K) == 110 && sizeof(block_q4_K) == 144 &&
              sizeof(block_q5_K) == 176 && sizeof(block_q6_K) == 210 && sizeof(block_q8_K) == 292 &&
              sizeof(block_iq4_xs) == 136 && sizeof(block_mxfp4x8) == 8 * sizeof(block_mxfp4) &&
              sizeof(block_q8_0x8) == 8 * sizeof(block_q8_0) && sizeof(block_q4_Kl) == sizeof(block_q4_K));
static_assert(sizeof(block_q1_0) == 18 && sizeof(block_q2_0) == 18 && sizeof(block_nvfp4) == 36 &&
              sizeof(block_tq1_0) == 54 && sizeof(block_tq2_0) == 66 && sizeof(block_iq3_xxs) == 98 &&
              sizeof(block_iq3_s) == 110);
static_assert(sizeof(block_iq2_xxs) == 66 && sizeof(block_iq2_xs) == 74 && sizeof(block_iq2_s) == 82 &&
              sizeof(block_iq1_s) == 50 && sizeof(block_iq1_m) == 56);

// E2M1 values doubled (ggml's kvalues_mxfp4) and the IQ4_NL codebook.
inline constexpr int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

}  // namespace k3
