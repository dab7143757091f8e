// Reference dequantizers (quant_ref.h) against the formulas of quant-formats.md, evaluated here
// from raw block bytes, against hand-worked values, and against ggml's dequantize_row_* on
// random blocks. MXFP4 / E8M0 exhaustively.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/error.h"
#include "codebooks.h"
#include "ggml_ref.h"
#include "iq_blocks.h"
#include "tensor/fp16.h"
#include "tensor/iq3_grids.h"
#include "tensor/iq_grids.h"
#include "tensor/quant_ref.h"

namespace {

using k3::GgmlType;
using k3::test::GgmlRef;
namespace ref = k3::ref;

#define REQUIRE_GGML(g)              \
  const GgmlRef* g = GgmlRef::get(); \
  ASSERT_NE(g, nullptr) << GgmlRef::load_error()

// ---- the spec's formulas, element by element, from raw little-endian bytes ----

float f16_at(const uint8_t* b, int off) { return k3::fp16_to_fp32(static_cast<uint16_t>(b[off] | b[off + 1] << 8)); }
int nib(const uint8_t* qs, int j) { return j < 16 ? qs[j] & 15 : qs[j - 16] >> 4; }  // §5 nibble order
constexpr int8_t E2M1x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
constexpr int8_t IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

uint32_t u32_at(const uint8_t* b, int off) { return b[off] | b[off + 1] << 8 | b[off + 2] << 16 | static_cast<uint32_t>(b[off + 3]) << 24; }
uint16_t u16_at(const uint8_t* b, int off) { return static_cast<uint16_t>(b[off] | b[off + 1] << 8); }
// Value j of grid entry k, and the sign of value j under a 7-bit IQ2 sign code (the 8th sign
// completes an even count).
int grid_at(const uint64_t* grid, int k, int j) { return static_cast<int8_t>(grid[k] >> (8 * j)); }
float sign7(uint32_t s, int j) {
  const int bit = j < 7 ? (s >> j) & 1 : __builtin_popcount(s & 127) & 1;
  return bit ? -1.f : 1.f;
}

// Value of element e of one block of type t, as §4-§8 and docs/formats.md define it.
float spec_value(GgmlType t, const uint8_t* b, int e) {
  switch (t) {
    case GgmlType::Q4_0: return static_cast<float>(nib(b + 2, e) - 8) * f16_at(b, 0);
    case GgmlType::Q4_1: return static_cast<float>(nib(b + 4, e)) * f16_at(b, 0) + f16_at(b, 2);
    case GgmlType::Q5_0: {
      const uint32_t qh = b[2] | b[3] << 8 | b[4] << 16 | static_cast<uint32_t>(b[5]) << 24;
      return static_cast<float>((nib(b + 6, e) | static_cast<int>((qh >> e) & 1) << 4) - 16) * f16_at(b, 0);
    }
    case GgmlType::Q5_1: {
      const uint32_t qh = b[4] | b[5] << 8 | b[6] << 16 | static_cast<uint32_t>(b[7]) << 24;
      return static_cast<float>(nib(b + 8, e) | ((qh >> e) & 1) << 4) * f16_at(b, 0) + f16_at(b, 2);
    }
    case GgmlType::Q8_0: return static_cast<float>(static_cast<int8_t>(b[2 + e])) * f16_at(b, 0);
    case GgmlType::Q8_1: return static_cast<float>(static_cast<int8_t>(b[4 + e])) * f16_at(b, 0);
    case GgmlType::Q2_K: {
      const int half = e / 128, r = e % 128, j = r / 32, l = r % 32;
      const int q = (b[16 + 32 * half + l] >> (2 * j)) & 3;
      const int sc = b[e / 16];
      return f16_at(b, 80) * static_cast<float>(sc & 15) * static_cast<float>(q) -
             f16_at(b, 82) * static_cast<float>(sc >> 4);
    }
    case GgmlType::Q3_K: {
      const uint8_t* scales = b + 96;
      const int s = e / 16;
      const int lo = s < 8 ? scales[s] & 15 : scales[s - 8] >> 4;
      const int hi = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
      const int S = (lo | hi << 4) - 32;
      const int half = e / 128, r = e % 128, j = r / 32, l = r % 32;
      const int q2 = (b[32 + 32 * half + l] >> (2 * j)) & 3;
      const int hbit = (b[e % 32] >> (e / 32)) & 1;
      return f16_at(b, 108) * static_cast<float>(S) * static_cast<float>(q2 + 4 * hbit - 4);
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      const uint8_t* scales = b + 4;
      const int j = e / 32;
      const int sc = j < 4 ? scales[j] & 63 : (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4;
      const int m = j < 4 ? scales[j + 4] & 63 : (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
      const int p = e / 64, r = e % 64, l = r % 32;
      const uint8_t* qs = b + (t == GgmlType::Q4_K ? 16 : 48);
      int code = r < 32 ? qs[32 * p + l] & 15 : qs[32 * p + l] >> 4;
      if (t == GgmlType::Q5_K) code |= ((b[16 + l] >> (2 * p + (r >= 32))) & 1) << 4;
      return f16_at(b, 0) * static_cast<float>(sc) * static_cast<float>(code) - f16_at(b, 2) * static_cast<float>(m);
    }
    case GgmlType::Q6_K: {
      const int half = e / 128, r = e % 128, g = r / 32, l = r % 32;
      const uint8_t lb = b[64 * half + l + 32 * (g & 1)];
      const int low = g < 2 ? lb & 15 : lb >> 4;
      const int high = (b[128 + 32 * half + l] >> (2 * g)) & 3;
      const int8_t sc = static_cast<int8_t>(b[192 + e / 16]);
      return f16_at(b, 208) * static_cast<float>(sc) * static_cast<float>((low | high << 4) - 32);
    }
    case GgmlType::Q8_K: {
      float d;
      std::memcpy(&d, b, 4);
      return d * static_cast<float>(static_cast<int8_t>(b[4 + e]));
    }
    case GgmlType::MXFP4: return static_cast<float>(E2M1x2[nib(b + 1, e)]) * k3::e8m0_to_fp32_half(b[0]);
    case GgmlType::IQ4_NL: return f16_at(b, 0) * static_cast<float>(IQ4NL[nib(b + 2, e)]);
    case GgmlType::IQ4_XS: {
      const int sb = e / 32, j = e % 32;
      const int scales_h = b[2] | b[3] << 8;
      const int ls = ((b[4 + sb / 2] >> (4 * (sb % 2))) & 15) | ((scales_h >> (2 * sb)) & 3) << 4;
      const float dl = f16_at(b, 0) * static_cast<float>(ls - 32);
      return dl * static_cast<float>(IQ4NL[nib(b + 8 + 16 * sb, j)]);
    }
    // docs/formats.md
    case GgmlType::Q1_0: return (b[2 + e / 8] >> (e % 8)) & 1 ? f16_at(b, 0) : -f16_at(b, 0);
    case GgmlType::Q2_0: return static_cast<float>(((b[2 + e / 4] >> (2 * (e % 4))) & 3) - 1) * f16_at(b, 0);
    case GgmlType::TQ2_0: return static_cast<float>(((b[32 * (e / 128) + e % 32] >> (2 * (e % 128 / 32))) & 3) - 1) * f16_at(b, 64);
    case GgmlType::TQ1_0: {
      // base-3 digits, most significant first: byte = ceil(v·256/243) of the 5-digit value v
      const int byte = e < 160 ? b[e % 32] : e < 240 ? b[32 + (e - 160) % 16] : b[48 + (e - 240) % 4];
      const int k = e < 160 ? e / 32 : e < 240 ? (e - 160) / 16 : (e - 240) / 4;
      const int v = byte * 243 / 256;  // the 5-digit value the byte encodes
      int digit = v;
      for (int i = k; i < 4; ++i) digit /= 3;
      return static_cast<float>(digit % 3 - 1) * f16_at(b, 52);
    }
    case GgmlType::NVFP4: {
      const int s = e / 16, j = e % 16, x = b[s];
      const int ex = (x >> 3) & 15, m = x & 7;
      const double scale = x == 0x7F ? 0 : ex == 0 ? m * std::ldexp(1.0, -9) : (8 + m) * std::ldexp(1.0, ex - 10);
      const int q = j < 8 ? b[4 + 8 * s + j] & 15 : b[4 + 8 * s + j - 8] >> 4;
      return static_cast<float>(E2M1x2[q] * 0.5 * scale);
    }
    case GgmlType::IQ3_XXS: {
      const int sb = e / 32, j = e % 32;
      const uint32_t sas = b[66 + 4 * sb] | b[67 + 4 * sb] << 8 | b[68 + 4 * sb] << 16 | static_cast<uint32_t>(b[69 + 4 * sb]) << 24;
      const uint32_t s7 = (sas >> (7 * (j / 8))) & 127;
      const bool neg = j % 8 == 7 ? __builtin_popcount(s7) % 2 : (s7 >> (j % 8)) & 1;
      const float db = f16_at(b, 0) * (0.5f + static_cast<float>(sas >> 28)) * 0.5f;
      const float v = db * static_cast<float>((k3::kIq3xxsGrid[b[2 + 8 * sb + j / 4]] >> (8 * (j % 4))) & 255);
      return neg ? -v : v;
    }
    case GgmlType::IQ3_S: {
      const int sb = e / 32, j = e % 32;
      const int index = b[2 + 8 * sb + j / 4] | ((b[66 + sb] >> (j / 4)) & 1) << 8;
      const float db = f16_at(b, 0) * static_cast<float>(1 + 2 * ((b[106 + sb / 2] >> (4 * (sb % 2))) & 15));
      const float v = db * static_cast<float>((k3::kIq3sGrid[index] >> (8 * (j % 4))) & 255);
      return (b[74 + 4 * sb + j / 8] >> (j % 8)) & 1 ? -v : v;
    }
    case GgmlType::IQ2_XXS: {
      const int ib = e / 32, g = (e % 32) / 8, j = e % 8;
      const uint32_t aux0 = u32_at(b, 2 + 8 * ib), aux1 = u32_at(b, 6 + 8 * ib);
      const float db = f16_at(b, 0) * (0.5f + static_cast<float>(aux1 >> 28)) * 0.25f;
      return db * static_cast<float>(grid_at(k3::kIqGrids.iq2xxs, (aux0 >> (8 * g)) & 255, j)) * sign7(aux1 >> (7 * g), j);
    }
    case GgmlType::IQ2_XS: {
      const uint16_t q = u16_at(b, 2 + 2 * (e / 8));
      const int sc = (b[66 + e / 32] >> (4 * ((e / 16) % 2))) & 15;
      const float db = f16_at(b, 0) * (0.5f + static_cast<float>(sc)) * 0.25f;
      return db * static_cast<float>(grid_at(k3::kIqGrids.iq2xs, q & 511, e % 8)) * sign7(q >> 9, e % 8);
    }
    case GgmlType::IQ2_S: {
      const int g = e / 8, idx = b[2 + g] | ((b[66 + g / 4] >> (2 * (g % 4))) & 3) << 8;
      const int sc = (b[74 + e / 32] >> (4 * ((e / 16) % 2))) & 15;
      const float db = f16_at(b, 0) * (0.5f + static_cast<float>(sc)) * 0.25f;
      const float sign = (b[34 + g] >> (e % 8)) & 1 ? -1.f : 1.f;
      return db * static_cast<float>(grid_at(k3::kIqGrids.iq2s, idx, e % 8)) * sign;
    }
    case GgmlType::IQ1_S: {
      const int g = e / 8;
      const uint16_t qh = u16_at(b, 34 + 2 * (e / 32));
      const int idx = b[2 + g] | ((qh >> (3 * (g % 4))) & 7) << 8;
      const float dl = f16_at(b, 0) * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float shift = qh & 0x8000 ? -0.125f : 0.125f;
      return dl * (static_cast<float>(grid_at(k3::kIqGrids.iq1s, idx, e % 8) - 1) + shift);
    }
    case GgmlType::IQ1_M: {
      const int g = e / 8, s = e / 16;
      const int qh = b[32 + g / 2] >> (4 * (g % 2));
      const int idx = b[g] | (qh & 7) << 8;
      const uint16_t d16 = static_cast<uint16_t>((b[49] >> 4) | (b[51] >> 4) << 4 | (b[53] >> 4) << 8 | (b[55] >> 4) << 12);
      const float dl = k3::fp16_to_fp32(d16) * static_cast<float>(2 * ((u16_at(b, 48 + 2 * (s / 4)) >> (3 * (s % 4))) & 7) + 1);
      const float shift = qh & 8 ? -0.125f : 0.125f;
      return dl * (static_cast<float>(grid_at(k3::kIqGrids.iq1s, idx, e % 8) - 1) + shift);
    }
    default: ADD_FAILURE() << "no formula for " << k3::type_name(t); return 0;
  }
}

// Byte offsets of the f16 fields of each block, kept finite in random blocks.
std::vector<int> f16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
    case GgmlType::Q1_0:
    case GgmlType::Q2_0:
    case GgmlType::IQ3_XXS:
    case GgmlType::IQ3_S: return {0};
    case GgmlType::TQ1_0: return {52};
    case GgmlType::TQ2_0: return {64};
    case GgmlType::IQ2_XXS:
    case GgmlType::IQ2_XS:
    case GgmlType::IQ2_S:
    case GgmlType::IQ1_S: return {0};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q8_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {0, 2};
    case GgmlType::Q2_K: return {80, 82};
    case GgmlType::Q3_K: return {108};
    case GgmlType::Q6_K: return {208};
    default: return {};
  }
}

// nblocks random blocks: random bytes; f16 fields finite (exponent 31 avoided); Q8_K's f32 d a
// random finite value in [-8, 8).
std::vector<uint8_t> random_blocks(GgmlType t, int nblocks, std::mt19937& rng) {
  const size_t bb = k3::type_info(t).block_bytes;
  std::vector<uint8_t> v(bb * nblocks);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  for (int i = 0; i < nblocks; ++i) {
    uint8_t* b = v.data() + bb * i;
    for (int off : f16_fields(t))
      if ((b[off + 1] & 0x7C) == 0x7C) b[off + 1] &= 0xBF;  // exponent 31 -> 15
    if (t == GgmlType::Q8_K) {
      const float d = std::uniform_real_distribution<float>(-8.f, 8.f)(rng);
      std::memcpy(b, &d, 4);
    }
    if (t == GgmlType::IQ1_M) b[55] &= 0xBF;  // f16 bit 14 (its exponent below 31) is bit 6 of byte 55
  }
  return v;
}

const GgmlType kDequantTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,  GgmlType::Q5_1,   GgmlType::Q8_0,
                                  GgmlType::Q8_1, GgmlType::Q2_K, GgmlType::Q3_K,  GgmlType::Q4_K,   GgmlType::Q5_K,
                                  GgmlType::Q6_K, GgmlType::Q8_K, GgmlType::MXFP4, GgmlType::IQ4_NL, GgmlType::IQ4_XS,
                                  GgmlType::Q1_0, GgmlType::Q2_0, GgmlType::TQ1_0, GgmlType::TQ2_0, GgmlType::NVFP4,
                                  GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S,
                                  GgmlType::IQ1_S, GgmlType::IQ1_M};
const GgmlType kLatticeTypes[] = {GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ2_S, GgmlType::IQ1_S, GgmlType::IQ1_M};

std::string type_param_name(const testing::TestParamInfo<GgmlType>& p) { return k3::type_name(p.param); }

class Dequant : public testing::TestWithParam<GgmlType> {};
class DequantGgml : public testing::TestWithParam<GgmlType> {};

// Random blocks: k3's dequantizer equals the spec formula for every element, bit for bit.
TEST_P(Dequant, MatchesSpecFormula) {
  const GgmlType t = GetParam();
  const auto& ti = k3::type_info(t);
  std::mt19937 rng(1234 + static_cast<int>(t));
  const int nblocks = 64;
  const auto blocks = random_blocks(t, nblocks, rng);
  std::vector<float> y(ti.block * nblocks);
  ref::dequantize_row(t, blocks.data(), y.data(), static_cast<int64_t>(y.size()));
  int bad = 0;
  for (int i = 0; i < nblocks; ++i)
    for (int e = 0; e < ti.block; ++e) {
      const float want = spec_value(t, blocks.data() + ti.block_bytes * i, e);
      const float got = y[ti.block * i + e];
      if (k3::f32_bits(got) != k3::f32_bits(want) && !(std::isnan(got) && std::isnan(want)) && ++bad <= 5)
        ADD_FAILURE() << "block " << i << " element " << e << ": " << got << " vs spec " << want;
    }
  EXPECT_EQ(bad, 0);
}

// Random blocks: bit-identical to ggml's dequantize_row_<type>.
TEST_P(DequantGgml, Matches) {
  REQUIRE_GGML(g);
  const GgmlType t = GetParam();
  const auto ggml_deq = g->dequantize(t);
  ASSERT_NE(ggml_deq, nullptr) << k3::type_name(t);
  const auto& ti = k3::type_info(t);
  std::mt19937 rng(99 + static_cast<int>(t));
  const int nblocks = 512;
  const auto blocks = random_blocks(t, nblocks, rng);
  const int64_t n = ti.block * nblocks;
  std::vector<float> got(n), want(n);
  ref::dequantize_row(t, blocks.data(), got.data(), n);
  ggml_deq(blocks.data(), want.data(), n);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += k3::f32_bits(got[i]) != k3::f32_bits(want[i]);
  EXPECT_EQ(bad, 0) << "of " << n << " elements";
}

// The lattice types exhaustively (every grid entry under every sign pattern or shift sign, every
// scale code; iq_blocks.h): bit-identical to ggml and to the spec formula.
TEST(DequantGgml, LatticeExhaustive) {
  REQUIRE_GGML(g);
  std::mt19937 rng(5);
  for (GgmlType t : kLatticeTypes) {
    const auto blocks = k3::test::iq_exhaustive_blocks(t, [&](int64_t) {
      return static_cast<uint16_t>(rng() & 0xBBFF);  // exponent below 31: finite
    });
    const int64_t nb = static_cast<int64_t>(blocks.size() / k3::type_info(t).block_bytes), n = nb * 256;
    std::vector<float> got(n), want(n);
    ref::dequantize_row(t, blocks.data(), got.data(), n);
    g->dequantize(t)(blocks.data(), want.data(), n);
    int64_t bad = 0, bad_spec = 0;
    for (int64_t i = 0; i < n; ++i) {
      bad += k3::f32_bits(got[i]) != k3::f32_bits(want[i]);
      const float spec = spec_value(t, blocks.data() + k3::type_info(t).block_bytes * (i / 256), static_cast<int>(i % 256));
      bad_spec += k3::f32_bits(got[i]) != k3::f32_bits(spec);
    }
    EXPECT_EQ(bad, 0) << k3::type_name(t) << " of " << n << " elements";
    EXPECT_EQ(bad_spec, 0) << k3::type_name(t) << " against the spec formula";
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, Dequant, testing::ValuesIn(kDequantTypes), type_param_name);
// ggml has no dequantize_row_q8_1.
std::vector<GgmlType> ggml_dequant_types() {
  std::vector<GgmlType> v;
  for (GgmlType t : kDequantTypes)
    if (t != GgmlType::Q8_1) v.push_back(t);
  return v;
}
INSTANTIATE_TEST_SUITE_P(AllTypes, DequantGgml, testing::ValuesIn(ggml_dequant_types()), type_param_name);

// ---- hand-worked blocks ----

// Decodes one block and checks the listed elements (index, value).
void expect_deq(GgmlType t, const std::vector<uint8_t>& block, std::initializer_list<std::pair<int, float>> want) {
  std::vector<float> y(k3::type_info(t).block);
  ref::dequantize_row(t, block.data(), y.data(), static_cast<int64_t>(y.size()));
  for (const auto& [i, v] : want) EXPECT_EQ(y[i], v) << k3::type_name(t) << " element " << i;
}

TEST(DequantHand, Legacy) {
  // Q4_0, d = 0.5: byte 0 = 0x1F -> element 0 code 15 -> (15-8)*0.5, element 16 code 1 -> -3.5.
  std::vector<uint8_t> q4_0(18, 0x88);
  q4_0[0] = 0x00, q4_0[1] = 0x38, q4_0[2] = 0x1F;
  expect_deq(GgmlType::Q4_0, q4_0, {{0, 3.5f}, {16, -3.5f}, {1, 0.f}});
  // Q4_1, d = 1, m = -1: byte 0 = 0x30 -> element 0: 0*1 - 1, element 16: 3*1 - 1.
  std::vector<uint8_t> q4_1(20, 0);
  q4_1[1] = 0x3C, q4_1[3] = 0xBC, q4_1[4] = 0x30;
  expect_deq(GgmlType::Q4_1, q4_1, {{0, -1.f}, {16, 2.f}});
  // Q5_0, d = 2: qh bit 0 set, nibble 2 -> code 18 -> (18-16)*2 = 4; element 31: qh bit 31, high
  // nibble of byte 15 = 0xF -> code 31 -> 30; element 16: code 0 -> -32.
  std::vector<uint8_t> q5_0(22, 0);
  q5_0[1] = 0x40, q5_0[2] = 0x01, q5_0[5] = 0x80, q5_0[6] = 0x02, q5_0[21] = 0xF0;
  expect_deq(GgmlType::Q5_0, q5_0, {{0, 4.f}, {31, 30.f}, {16, -32.f}});
  // Q5_1, d = 0.25, m = 1: element 5 code 16 + 1 = 17 -> 17*0.25 + 1 = 5.25.
  std::vector<uint8_t> q5_1(24, 0);
  q5_1[1] = 0x34, q5_1[3] = 0x3C, q5_1[4] = 0x20, q5_1[8 + 5] = 0x01;
  expect_deq(GgmlType::Q5_1, q5_1, {{5, 5.25f}, {0, 1.f}});
  // Q8_0 / Q8_1, d = -0.5: qs = -128 -> 64, qs = 7 -> -3.5.
  std::vector<uint8_t> q8_0(34, 0);
  q8_0[1] = 0xB8, q8_0[2] = 0x80, q8_0[33] = 7;
  expect_deq(GgmlType::Q8_0, q8_0, {{0, 64.f}, {31, -3.5f}});
  std::vector<uint8_t> q8_1(36, 0);
  q8_1[1] = 0xB8, q8_1[3] = 0x7B, q8_1[4] = 0x80, q8_1[35] = 7;  // s is not used to decode
  expect_deq(GgmlType::Q8_1, q8_1, {{0, 64.f}, {31, -3.5f}});
}

TEST(DequantHand, KQuants) {
  // Q2_K, d = 1, dmin = 0.5, every scale byte 0x23 (scale 3, min 2), qs[0] = 0b11100100: elements
  // 0, 32, 64, 96 have codes 0, 1, 2, 3 -> 3*q - 0.5*2.
  std::vector<uint8_t> q2(84, 0);
  for (int s = 0; s < 16; ++s) q2[s] = 0x23;
  q2[16] = 0xE4, q2[81] = 0x3C, q2[83] = 0x38;
  expect_deq(GgmlType::Q2_K, q2, {{0, -1.f}, {32, 2.f}, {64, 5.f}, {96, 8.f}, {128, -1.f}});
  // Q3_K, d = 1: sub-block 0 scale code 0x21 (low nibble 1 in scales[0], high bits 2 in scales[8]
  // bits 0-1) -> S = 33 - 32 = 1; element 0: q2 = 3, hmask bit set -> q = 3; element 1: q2 = 0,
  // no hmask bit -> q = -4. Sub-block 1 code 0 -> S = -32, element 16 (q2 = 0, hbit 1) -> q = 0.
  std::vector<uint8_t> q3(110, 0);
  q3[0] = 0x01, q3[16] = 0x01, q3[32] = 0x03, q3[96] = 0x01, q3[104] = 0x02, q3[109] = 0x3C;
  // element 17: S = -32, q = -4
  expect_deq(GgmlType::Q3_K, q3, {{0, 3.f}, {1, -4.f}, {16, -0.f}, {17, 128.f}});
  // Q4_K, d = 1, dmin = 1: sub-block 0 scale 2 min 1; sub-block 4 scale 0x25 = 37 (low 5 in
  // scales[8], high 2 in scales[0] bits 6-7), min 0x13 = 19 (low 3 in scales[8] high nibble,
  // high 1 in scales[4] bits 6-7). Element 0 code 5 -> 2*5 - 1; element 128 code 7 -> 37*7 - 19.
  std::vector<uint8_t> q4(144, 0);
  q4[1] = 0x3C, q4[3] = 0x3C;
  q4[4 + 0] = 0x02 | 0x80, q4[4 + 4] = 0x01 | 0x40, q4[4 + 8] = 0x35, q4[4 + 5] = 0x01;
  q4[16] = 0x05, q4[16 + 64] = 0x07;
  // element 32: sub-block 1: scale 0, min 1
  expect_deq(GgmlType::Q4_K, q4, {{0, 9.f}, {128, 240.f}, {32, -1.f}});
  // Q5_K: d, dmin and scales as Q4_K, sub-block 5 scale 3 min 0. Element 128 (p = 2, r = 0): low
  // nibble 7, qh[0] bit 4 clear -> 240 as above; element 160 (r = 32): high nibble 1, qh[0] bit 5
  // set -> code 17 -> 3*17.
  std::vector<uint8_t> q5(176, 0);
  std::memcpy(q5.data(), q4.data(), 16);
  q5[4 + 9] = 0x03, q5[16] = 0x20, q5[48 + 64] = 0x17;
  expect_deq(GgmlType::Q5_K, q5, {{128, 240.f}, {160, 51.f}});
  // Q6_K, d = 0.5: scales[0] = -2; element 0 low nibble 15, high bits 3 -> q = 63 -> 0.5*-2*31;
  // element 64 (g = 2): high nibble of ql[0] = 1, qh bits 4-5 = 2 -> q = 33 -> -1.
  std::vector<uint8_t> q6(210, 0);
  q6[0] = 0x1F, q6[128] = 0x23, q6[192] = 0xFE, q6[192 + 4] = 0xFE, q6[209] = 0x38;
  expect_deq(GgmlType::Q6_K, q6, {{0, -31.f}, {64, -1.f}});
  // Q8_K, d = 0.25 (f32): qs -100 -> -25.
  std::vector<uint8_t> q8k(292, 0);
  const float d = 0.25f;
  std::memcpy(q8k.data(), &d, 4);
  q8k[4 + 255] = static_cast<uint8_t>(-100);
  expect_deq(GgmlType::Q8_K, q8k, {{255, -25.f}});
}

TEST(DequantHand, Iq4) {
  // IQ4_NL, d = 0.5: nibble 0 -> -127*0.5, nibble 15 -> 113*0.5.
  std::vector<uint8_t> nl(18, 0);
  nl[1] = 0x38, nl[2] = 0xF0;
  expect_deq(GgmlType::IQ4_NL, nl, {{0, -63.5f}, {16, 56.5f}});
  // IQ4_XS, d = 1: sub-block 3 scale code 0x22 = 34 (low 2 in the high nibble of scales_l[1],
  // high 2 in scales_h bits 6-7) -> dl = 2; its element 0 nibble 9 -> 2*13.
  std::vector<uint8_t> xs(136, 0);
  xs[1] = 0x3C, xs[2] = 0x80, xs[4 + 1] = 0x20, xs[8 + 48] = 0x09;
  // element 0: sub-block 0: code 0 -> dl = -32, nibble 0 -> -127
  expect_deq(GgmlType::IQ4_XS, xs, {{96, 26.f}, {0, 32.f * 127.f}});
}

// MXFP4: all 16 codes x all 256 exponents equal E2M1[code] * 2^(e-127) and ggml's values.
TEST(DequantHand, Mxfp4Exhaustive) {
  REQUIRE_GGML(g);
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  std::vector<k3::block_mxfp4> blocks(256);
  for (int e = 0; e < 256; ++e) {
    blocks[e].e = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) blocks[e].qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
  }
  std::vector<float> got(256 * 32), want(256 * 32);
  ref::dequantize_row_mxfp4(blocks.data(), got.data(), 256 * 32);
  g->dequantize(GgmlType::MXFP4)(blocks.data(), want.data(), 256 * 32);
  int bad = 0;
  for (int e = 0; e < 256; ++e)
    for (int j = 0; j < 32; ++j) {
      const int code = j < 16 ? j : 15 - (j - 16);
      const float exact = static_cast<float>(e2m1[code] * std::ldexp(1.0, e - 127));  // exact or inf
      const float v = got[32 * e + j];
      if ((v != exact || k3::f32_bits(v) != k3::f32_bits(want[32 * e + j])) && ++bad <= 5)
        ADD_FAILURE() << "e " << e << " code " << code << ": " << v << " vs " << exact << " ggml " << want[32 * e + j];
    }
  EXPECT_EQ(bad, 0);
}

// Every codebook entry, sign pattern, scale code and code byte (codebooks.h), against ggml bit for bit.
TEST(DequantHand, CodebooksExhaustive) {
  REQUIRE_GGML(g);
  for (GgmlType t : k3::test::kCodebookTypes) {
    const std::vector<uint8_t> blocks = k3::test::codebook_blocks(t, 0x3800);  // d = 0.5
    const auto& ti = k3::type_info(t);
    const int64_t n = static_cast<int64_t>(blocks.size() / ti.block_bytes) * ti.block;
    std::vector<float> got(n), want(n);
    ref::dequantize_row(t, blocks.data(), got.data(), n);
    g->dequantize(t)(blocks.data(), want.data(), n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += k3::f32_bits(got[i]) != k3::f32_bits(want[i]);
    EXPECT_EQ(bad, 0) << k3::type_name(t) << ": of " << n << " elements";
  }
}

TEST(DequantHand, LowBit) {
  // Q1_0, d = 0.5: bit 0 of byte 0 set -> +0.5, bit 1 clear -> -0.5; element 127: bit 7 of byte 15.
  std::vector<uint8_t> q1(18, 0);
  q1[1] = 0x38, q1[2] = 0x01, q1[17] = 0x80;
  expect_deq(GgmlType::Q1_0, q1, {{0, 0.5f}, {1, -0.5f}, {127, 0.5f}});
  // Q2_0, d = 2: byte 0 = 0b11100100 -> codes 0, 1, 2, 3 -> -2, 0, 2, 4.
  std::vector<uint8_t> q2(18, 0x55);
  q2[0] = 0x00, q2[1] = 0x40, q2[2] = 0xE4;
  expect_deq(GgmlType::Q2_0, q2, {{0, -2.f}, {1, 0.f}, {2, 2.f}, {3, 4.f}});
  // TQ1_0, d = 1: the digits 2, 0, 1, 2, 1 (value 2·81 + 0·27 + 1·9 + 2·3 + 1 = 178) in byte 0 are
  // stored as ceil(178·256/243) = 188 and decode to elements 0, 32, 64, 96, 128 = 1, -1, 0, 1, 0.
  std::vector<uint8_t> t1(54, 0);
  t1[0] = 188, t1[53] = 0x3C;
  expect_deq(GgmlType::TQ1_0, t1, {{0, 1.f}, {32, -1.f}, {64, 0.f}, {96, 1.f}, {128, 0.f}});
  // TQ2_0, d = 0.5: qs[33] = 0b00100100 -> elements 129, 161, 193 (codes 0, 1, 2) = -0.5, 0, 0.5.
  std::vector<uint8_t> t2(66, 0);
  t2[33] = 0x24, t2[65] = 0x38;
  expect_deq(GgmlType::TQ2_0, t2, {{129, -0.5f}, {161, 0.f}, {193, 0.5f}});
  // NVFP4: sub-block 1 scale 0x38 (exponent 7, mantissa 0: 1.0); its byte 0 = 0x7A -> element 16
  // code 0xA -> E2M1 -1, element 24 code 7 -> 6. Sub-block 0 scale 0x01 (subnormal 2^-9) times E2M1 0.5.
  std::vector<uint8_t> nv(36, 0);
  nv[0] = 0x01, nv[1] = 0x38, nv[4] = 0x01, nv[12] = 0x7A;
  expect_deq(GgmlType::NVFP4, nv, {{16, -1.f}, {24, 6.f}, {0, std::ldexp(0.5f, -9)}});
}

// Float rows through the dispatcher: F32 copied, F16 / BF16 widened (conversions: test_fp16.cpp).
TEST(DequantHand, FloatRows) {
  const float f32[2] = {1.5f, -0.f};
  const uint16_t f16[2] = {0x3E00, 0x8001}, bf16[2] = {0x3FC0, 0xFF80};
  float y[2];
  ref::dequantize_row(GgmlType::F32, f32, y, 2);
  EXPECT_EQ(k3::f32_bits(y[1]), 0x80000000u);
  EXPECT_EQ(y[0], 1.5f);
  ref::dequantize_row(GgmlType::F16, f16, y, 2);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -std::ldexp(1.f, -24));
  ref::dequantize_row(GgmlType::BF16, bf16, y, 2);
  EXPECT_EQ(y[0], 1.5f);
  EXPECT_EQ(y[1], -INFINITY);
}

TEST(DequantHand, RejectsBadRows) {
  std::vector<float> y(64);
  std::vector<uint8_t> x(1024);
  EXPECT_THROW(ref::dequantize_row(GgmlType::Q4_K, x.data(), y.data(), 32), k3::Error);
  EXPECT_THROW(ref::dequantize_row(GgmlType::I32, x.data(), y.data(), 16), k3::Error);
  EXPECT_THROW(ref::dequantize_row(GgmlType::NVFP4, x.data(), y.data(), 32), k3::Error);
  EXPECT_THROW(ref::quantize_rows(GgmlType::Q1_0, y.data(), x.data(), 1, 64, nullptr), k3::Error);
  EXPECT_THROW(ref::quantize_rows(GgmlType::Q8_K, y.data(), x.data(), 1, 256, nullptr), k3::Error);
  EXPECT_THROW(ref::quantize_rows(GgmlType::Q4_0, y.data(), x.data(), 1, 48, nullptr), k3::Error);
}

}  // namespace
