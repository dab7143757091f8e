// 4-bit codebook types: MXFP4 (E2M1 codes, E8M0 scale; quant-formats.md §7), NVFP4 (E2M1 codes,
// UE4M3 scales per 16; docs/formats.md) and the non-linear IQ4_NL / IQ4_XS (§8). Nibble order as the
// legacy types: byte j = element j | element j+16 << 4 (NVFP4: per 16, elements j and j + 8).
#include <cmath>

#include "tensor/fp16.h"
#include "tensor/quant_ref.h"
#include "tensor/quant_ref_impl.h"

namespace k3::ref {

using namespace detail;

namespace {

void pack_nibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < QK / 2; ++j) qs[j] = static_cast<uint8_t>(L[j] | L[j + 16] << 4);
}

// ---- MXFP4 ----

// Index minimizing |kvalues[i]*d - x|, the first minimum in index order (+0 before -0, and the
// smaller magnitude on a tie).
int best_index_mxfp4(float x, float d) {
  int best = 0;
  float best_err = std::fabs(kvalues_mxfp4[0] * d - x);
  for (int i = 1; i < 16; ++i) {
    const float e = std::fabs(kvalues_mxfp4[i] * d - x);
    if (e < best_err) {
      best = i;
      best_err = e;
    }
  }
  return best;
}

// ---- NVFP4 ----

// ggml's UE4M3 rounding of a scale: x <= 0 (and NaN) gives 0, x is clamped to 448; below 2^-6 the
// subnormal code round(x·512) (half up, 0 under 1/1024, at most 7), else the 3 mantissa bits
// rounded half up on the next bit, 0x7E (448) from an exponent of 15 up.
uint8_t fp32_to_ue4m3(float x) {
  if (!(x > 0.0f)) return 0;
  if (x > 448.0f) x = 448.0f;
  const uint32_t bits = f32_bits(x);
  int e = static_cast<int>((bits >> 23) & 0xFF) - 127 + 7;
  if (e <= 0) {
    const int m = static_cast<int>(x * 512.0f + 0.5f);
    return static_cast<uint8_t>(m < 1 ? 0 : m > 7 ? 7 : m);
  }
  if (e >= 15) return 0x7E;
  int m = static_cast<int>((bits >> 20) & 7) + static_cast<int>((bits >> 19) & 1);
  if (m > 7) {
    m = 0;
    if (++e >= 15) return 0x7E;
  }
  return static_cast<uint8_t>(e << 3 | m);
}

// ---- IQ4 ----

// Nearest entry of the sorted kvalues_iq4nl; a tie goes up (§2 best_index).
int best_index_iq4(float v) {
  const int8_t* T = kvalues_iq4nl;
  if (v <= T[0]) return 0;
  if (v >= T[15]) return 15;
  int k = 1;
  while (!(v < T[k])) ++k;  // T[k-1] <= v < T[k]
  return (v - T[k - 1]) < (T[k] - v) ? k - 1 : k;
}

// Scale of one 32-element sub-block (§8 step 2): a weighted least-squares fit over 15 trial grids.
float iq4_subblock_scale(const float* xb, const float* w) {
  const int8_t* T = kvalues_iq4nl;
  const AbsMax m = abs_max(xb, 32);
  if (m.amax < GROUP_MAX_EPS) return 0.f;
  auto fit = [&](float id, float& sumqx, float& sumq2) {
    sumqx = 0;
    sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = T[best_index_iq4(id * xb[j])];
      sumqx += w[j] * q * xb[j];
      sumq2 += w[j] * q * q;
    }
  };
  float sumqx, sumq2;
  float d = -m.max / T[0];
  fit(1 / d, sumqx, sumq2);
  d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
  float best = d * sumqx;
  for (int itry = -7; itry <= 7; ++itry) {
    fit((itry + T[0]) / m.max, sumqx, sumq2);  // scales of the opposite sign to the first pass
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// Scales of the S/32 sub-blocks of a group of S elements, each by iq4_subblock_scale.
void iq4_scales(const float* x, const float* qw, int S, float* scales) {
  float sigma2 = 0;
  for (int j = 0; j < S; ++j) sigma2 += x[j] * x[j];
  sigma2 *= 2.f / S;
  float w[32];
  for (int b = 0; b < S / 32; ++b) {
    const float* xb = x + 32 * b;
    for (int j = 0; j < 32; ++j) w[j] = qw ? qw[32 * b + j] * std::sqrt(sigma2 + xb[j] * xb[j]) : xb[j] * xb[j];
    scales[b] = iq4_subblock_scale(xb, w);
  }
}

void quantize_block_iq4_xs(const float* x, block_iq4_xs& y, const float* qw) {
  float scales[8];
  iq4_scales(x, qw, QK_K, scales);
  float max_scale = 0, amax_scale = 0;
  for (int b = 0; b < 8; ++b)
    if (std::fabs(scales[b]) > amax_scale) {
      amax_scale = std::fabs(scales[b]);
      max_scale = scales[b];
    }
  const float d = -max_scale / 32;  // -0 for an all-zero super-block
  y.d = fp32_to_fp16(d);
  const float id = d != 0 ? 1 / d : 0.f;
  y.scales_h = 0;
  uint8_t L[32];
  for (int b = 0; b < 8; ++b) {
    const int l = clampi(nearest_int(id * scales[b]), -32, 31);
    // dl and idl use the unrounded d, not the stored f16.
    const float dl = d * l;
    const float idl = dl != 0 ? 1 / dl : 0.f;
    for (int j = 0; j < 32; ++j) L[j] = static_cast<uint8_t>(best_index_iq4(idl * x[32 * b + j]));
    pack_nibbles(L, y.qs + 16 * b);
    const int code = l + 32;
    if (b % 2 == 0)
      y.scales_l[b / 2] = static_cast<uint8_t>(code & 15);
    else
      y.scales_l[b / 2] |= static_cast<uint8_t>((code & 15) << 4);
    y.scales_h |= static_cast<uint16_t>((code >> 4) << (2 * b));
  }
}

}  // namespace

// ---- dequantization ----

void dequantize_row_mxfp4(const block_mxfp4* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, y += QK) {
    const float d = e8m0_to_fp32_half(x[i].e);
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = kvalues_mxfp4[x[i].qs[j] & 15] * d;
      y[j + 16] = kvalues_mxfp4[x[i].qs[j] >> 4] * d;
    }
  }
}

void dequantize_row_mxfp4_lanes(const block_mxfp4x8* x, float* y, int64_t n) {
  for (int64_t g = 0; g < n / QK_K; ++g, y += QK_K)
    for (int l = 0; l < 8; ++l) {
      const float d = mxfp4x8_half_scale(x[g], l);
      for (int i = 0; i < QK; ++i) y[QK * kLaneBlock[l] + i] = kvalues_mxfp4[mxfp4x8_code(x[g], l, i)] * d;
    }
}

void dequantize_row_nvfp4(const block_nvfp4* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_NVFP4; ++i)
    for (int s = 0; s < 4; ++s, y += 16) {
      const float d = ue4m3_to_fp32_half(x[i].d[s]);
      for (int j = 0; j < 8; ++j) {
        y[j] = kvalues_mxfp4[x[i].qs[8 * s + j] & 15] * d;
        y[j + 8] = kvalues_mxfp4[x[i].qs[8 * s + j] >> 4] * d;
      }
    }
}

void dequantize_row_iq4_nl(const block_iq4_nl* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, y += QK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = d * kvalues_iq4nl[x[i].qs[j] & 15];
      y[j + 16] = d * kvalues_iq4nl[x[i].qs[j] >> 4];
    }
  }
}

void dequantize_row_iq4_xs(const block_iq4_xs* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int b = 0; b < 8; ++b, y += 32) {
      const int ls = ((x[i].scales_l[b / 2] >> (4 * (b % 2))) & 15) | ((x[i].scales_h >> (2 * b)) & 3) << 4;
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* qs = x[i].qs + 16 * b;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * kvalues_iq4nl[qs[j] & 15];
        y[j + 16] = dl * kvalues_iq4nl[qs[j] >> 4];
      }
    }
  }
}

// ---- quantization ----

void quantize_row_mxfp4(const float* x, block_mxfp4* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    float amax = 0;
    for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
    // float32 log2f then floor; out-of-range exponents keep their low 8 bits, as ggml's x86 build.
    const uint8_t e = amax > 0 ? static_cast<uint8_t>(static_cast<int32_t>(std::floor(std::log2(amax)) - 2 + 127)) : 0;
    const float d = e8m0_to_fp32_half(e);
    y[i].e = e;
    uint8_t L[QK];
    for (int j = 0; j < QK; ++j) L[j] = static_cast<uint8_t>(best_index_mxfp4(x[j], d));
    pack_nibbles(L, y[i].qs);
  }
}

// Per 16 elements: the scale UE4M3(max |x| / 6), codes the nearest E2M1 values under it.
void quantize_row_nvfp4(const float* x, block_nvfp4* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_NVFP4; ++i)
    for (int s = 0; s < 4; ++s, x += 16) {
      float amax = 0;
      for (int j = 0; j < 16; ++j) amax = amax < std::fabs(x[j]) ? std::fabs(x[j]) : amax;
      y[i].d[s] = fp32_to_ue4m3(amax / 6.0f);
      const float d = ue4m3_to_fp32_half(y[i].d[s]);
      for (int j = 0; j < 8; ++j)
        y[i].qs[8 * s + j] = static_cast<uint8_t>(best_index_mxfp4(x[j], d) | best_index_mxfp4(x[j + 8], d) << 4);
    }
}

void quantize_row_iq4_nl(const float* x, block_iq4_nl* y, int64_t n, const float* qw) {
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    float scale;
    iq4_scales(x, qw ? qw + i * QK : nullptr, QK, &scale);
    y[i].d = fp32_to_fp16(scale);
    const float id = scale != 0 ? 1 / scale : 0.f;  // unrounded scale
    uint8_t L[QK];
    for (int j = 0; j < QK; ++j) L[j] = static_cast<uint8_t>(best_index_iq4(id * x[j]));
    pack_nibbles(L, y[i].qs);
  }
}

void quantize_row_iq4_xs(const float* x, block_iq4_xs* y, int64_t n, const float* qw) {
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_block_iq4_xs(x + i * QK_K, y[i], qw ? qw + i * QK_K : nullptr);
}

}  // namespace k3::ref
