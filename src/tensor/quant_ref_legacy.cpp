// Legacy 32-element types Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 / Q8_1 (quant-formats.md §4, §5, §6.7).
// Nibble order: byte j holds element j (low nibble) and element j+16 (high nibble).
#include <cmath>

#include "tensor/fp16.h"
#include "tensor/quant_ref.h"
#include "tensor/quant_ref_impl.h"

namespace k3::ref {

using namespace detail;

namespace {

// Importance weights of the legacy weighted paths: qw_j*sqrt(sigma2 + x_j^2), sigma2 = mean x^2
// over the whole row.
float row_sigma2(const float* x, int64_t n) {
  float sum_x2 = 0;
  for (int64_t j = 0; j < n; ++j) sum_x2 += x[j] * x[j];
  return sum_x2 / static_cast<float>(n);
}
void legacy_weights(const float* x, const float* qw, float sigma2, float* w) {
  for (int j = 0; j < QK; ++j) w[j] = qw[j] * std::sqrt(sigma2 + x[j] * x[j]);
}

// min and max of a block: strict running comparisons from the first element (§5).
void min_max(const float* x, float& min, float& max) {
  min = max = x[0];
  for (int j = 1; j < QK; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

void pack_nibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < QK / 2; ++j) qs[j] = static_cast<uint8_t>((L[j] & 15) | (L[j + 16] & 15) << 4);
}
// The 5th bit of element j goes to bit j of qh (u32 LE).
void pack_high_bits(const uint8_t* L, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < QK; ++j) h |= static_cast<uint32_t>((L[j] >> 4) & 1) << j;
  std::memcpy(qh, &h, 4);
}
uint32_t load_qh(const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return h;
}

// Q4_0 / Q5_0 reference: d = max / -(2^(bits-1)); n = min(nmax, (int)(x*id + offset + 0.5)).
// The sum is non-negative, so the integer conversion is a floor (§2).
float quantize_block_sym(const float* x, uint8_t* L, float half_range, int nmax) {
  const float d = abs_max(x, QK).max / -half_range;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < QK; ++j)
    L[j] = static_cast<uint8_t>(std::min(nmax, static_cast<int>(x[j] * id + (half_range + 0.5f))));
  return d;
}

// Weighted Q4_0 / Q5_0: make_qx_quants codes are already offset by nmax.
float quantize_block_sym_w(const float* x, const float* qw, float sigma2, uint8_t* L, int nmax) {
  float w[QK];
  int8_t Ls[QK];
  legacy_weights(x, qw, sigma2, w);
  const float d = make_qx_quants(QK, nmax, x, Ls, w);
  for (int j = 0; j < QK; ++j) L[j] = static_cast<uint8_t>(Ls[j]);
  return d;
}

// Weighted Q4_1 / Q5_1: returns d, *m = the block offset (<= 0).
float quantize_block_asym_w(const float* x, const float* qw, float sigma2, uint8_t* L, int nmax, float* m) {
  float w[QK];
  legacy_weights(x, qw, sigma2, w);
  float min_out;
  const float d = make_qkx2_quants(QK, nmax, x, w, L, &min_out, -0.9f, 0.05f, 36, false);  // make_qkx3_quants
  *m = -min_out;
  return d;
}

}  // namespace

// ---- dequantization ----

void dequantize_row_q4_0(const block_q4_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, y += QK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 15) - 8) * d;
      y[j + 16] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_row_q4_1(const block_q4_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, y += QK) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < QK / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 15) * d + m;
      y[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_row_q5_0(const block_q5_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, y += QK) {
    const float d = fp16_to_fp32(x[i].d);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < QK / 2; ++j) {
      const int lo = (x[i].qs[j] & 15) | ((qh >> j) & 1) << 4;
      const int hi = (x[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
      y[j] = static_cast<float>(lo - 16) * d;
      y[j + 16] = static_cast<float>(hi - 16) * d;
    }
  }
}

void dequantize_row_q5_1(const block_q5_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, y += QK) {
    const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
    const uint32_t qh = load_qh(x[i].qh);
    for (int j = 0; j < QK / 2; ++j) {
      const int lo = (x[i].qs[j] & 15) | ((qh >> j) & 1) << 4;
      const int hi = (x[i].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4;
      y[j] = static_cast<float>(lo) * d + m;
      y[j + 16] = static_cast<float>(hi) * d + m;
    }
  }
}

void dequantize_row_q8_0(const block_q8_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, y += QK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequantize_row_q8_0_x8(const block_q8_0x8* x, float* y, int64_t n) {
  for (int64_t g = 0; g < n / QK_K; ++g, y += QK_K)
    for (int k = 0; k < 8; ++k) {
      const float d = fp16_to_fp32(x[g].d[k]);
      for (int i = 0; i < QK; ++i) y[QK * k + i] = static_cast<float>(x[g].qs[QK * k + i]) * d;
    }
}

void dequantize_row_q8_1(const block_q8_1* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, y += QK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// ---- quantization ----

void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n, const float* qw) {
  const float sigma2 = qw ? row_sigma2(x, n) : 0.f;
  uint8_t L[QK];
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    const float d = qw ? quantize_block_sym_w(x, qw + i * QK, sigma2, L, 8) : quantize_block_sym(x, L, 8.f, 15);
    y[i].d = fp32_to_fp16(d);
    pack_nibbles(L, y[i].qs);
  }
}

void quantize_row_q5_0(const float* x, block_q5_0* y, int64_t n, const float* qw) {
  const float sigma2 = qw ? row_sigma2(x, n) : 0.f;
  uint8_t L[QK];
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    const float d = qw ? quantize_block_sym_w(x, qw + i * QK, sigma2, L, 16) : quantize_block_sym(x, L, 16.f, 31);
    y[i].d = fp32_to_fp16(d);
    pack_nibbles(L, y[i].qs);
    pack_high_bits(L, y[i].qh);
  }
}

// Q4_1 / Q5_1 reference: d = (max - min)/nmax; code = (x - min)*id + 0.5 truncated (non-negative).
void quantize_row_q4_1(const float* x, block_q4_1* y, int64_t n, const float* qw) {
  const float sigma2 = qw ? row_sigma2(x, n) : 0.f;
  uint8_t L[QK];
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    float d, m;
    if (qw) {
      d = quantize_block_asym_w(x, qw + i * QK, sigma2, L, 15, &m);
    } else {
      float max;
      min_max(x, m, max);
      d = (max - m) / 15;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      for (int j = 0; j < QK; ++j) L[j] = static_cast<uint8_t>(std::min(15, static_cast<int>((x[j] - m) * id + 0.5f)));
    }
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(m);
    pack_nibbles(L, y[i].qs);
  }
}

void quantize_row_q5_1(const float* x, block_q5_1* y, int64_t n, const float* qw) {
  const float sigma2 = qw ? row_sigma2(x, n) : 0.f;
  uint8_t L[QK];
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    float d, m;
    if (qw) {
      d = quantize_block_asym_w(x, qw + i * QK, sigma2, L, 31, &m);
    } else {
      float max;
      min_max(x, m, max);
      d = (max - m) / 31;
      const float id = d != 0 ? 1.0f / d : 0.0f;
      for (int j = 0; j < QK; ++j) L[j] = static_cast<uint8_t>(static_cast<int>((x[j] - m) * id + 0.5f));
    }
    y[i].d = fp32_to_fp16(d);
    y[i].m = fp32_to_fp16(m);
    pack_nibbles(L, y[i].qs);
    pack_high_bits(L, y[i].qh);
  }
}

// Q8_0 / Q8_1: codes use the unrounded d; roundf ties away from zero (§4).
namespace {
float quantize_block_q8(const float* x, int8_t* qs) {
  float amax = 0;
  for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int j = 0; j < QK; ++j) qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  return d;
}
}  // namespace

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, x += QK) y[i].d = fp32_to_fp16(quantize_block_q8(x, y[i].qs));
}

void quantize_row_q8_1(const float* x, block_q8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    const float d = quantize_block_q8(x, y[i].qs);
    int sum = 0;
    for (int j = 0; j < QK; ++j) sum += y[i].qs[j];
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(static_cast<float>(sum) * d);
  }
}

}  // namespace k3::ref
