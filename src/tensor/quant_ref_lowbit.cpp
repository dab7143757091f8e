// The 1- and 2-bit types Q1_0 and Q2_0 and the ternary TQ1_0 and TQ2_0 (docs/formats.md): layouts,
// dequantization and ggml's quantizers, which take no importance matrix (ggml_quantize_chunk
// ignores one for these four).
#include <cmath>

#include "tensor/fp16.h"
#include "tensor/quant_ref.h"
#include "tensor/quant_ref_impl.h"

namespace k3::ref {

namespace {

float abs_max_of(const float* x, int n) {
  float amax = 0;
  for (int j = 0; j < n; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
  return amax;
}

// A trit (-1, 0, 1 stored as 0, 1, 2) of the TQ types: x·id rounded half away from zero.
int trit(float x, float id) { return static_cast<int>(std::lround(x * id)) + 1; }

// The base-3 byte of TQ1_0 holding the trits t[0..4], t[0] the most significant: 3^5 = 243
// values spread over 256 (rounded up), so that multiplying by 3^k modulo 256 brings trit k to the
// top and ·3 >> 8 reads it.
uint8_t pack_trits(const int* t) {
  unsigned q = 0;
  for (int k = 0; k < 5; ++k) q = q * 3 + static_cast<unsigned>(t[k]);
  return static_cast<uint8_t>((q * 256 + 242) / 243);
}

// Codes stored as value + 1, one f16 scale a block of QK.
template <int QK, class Block, int (*code)(const Block&, int)>
void dequantize_offset_codes(const Block* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, y += QK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int e = 0; e < QK; ++e) y[e] = static_cast<float>(code(x[i], e) - 1) * d;
  }
}
}  // namespace

void dequantize_row_q1_0(const block_q1_0* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK1_0; ++i, y += QK1_0) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < QK1_0; ++j) y[j] = (x[i].qs[j / 8] >> (j % 8)) & 1 ? d : -d;
  }
}

void dequantize_row_q2_0(const block_q2_0* x, float* y, int64_t n) {
  dequantize_offset_codes<QK2_0, block_q2_0, q2_0_code>(x, y, n);
}
void dequantize_row_tq1_0(const block_tq1_0* x, float* y, int64_t n) {
  dequantize_offset_codes<QK_K, block_tq1_0, tq1_0_code>(x, y, n);
}
void dequantize_row_tq2_0(const block_tq2_0* x, float* y, int64_t n) {
  dequantize_offset_codes<QK_K, block_tq2_0, tq2_0_code>(x, y, n);
}

// d = mean |x| of the block; bit j set where x_j >= 0 (so -0 too).
void quantize_row_q1_0(const float* x, block_q1_0* y, int64_t n) {
  for (int64_t i = 0; i < n / QK1_0; ++i, x += QK1_0) {
    float sum = 0;
    for (int j = 0; j < QK1_0; ++j) sum += std::fabs(x[j]);
    y[i].d = fp32_to_fp16(sum / QK1_0);
    for (int b = 0; b < QK1_0 / 8; ++b) {
      uint8_t bits = 0;
      for (int k = 0; k < 8; ++k) bits |= static_cast<uint8_t>((x[8 * b + k] >= 0.0f) << k);
      y[i].qs[b] = bits;
    }
  }
}

// d = max |x|; code = clamp(round-half-away(x/d) + 1, 0, 3) (values -1, 0, 1, 2).
void quantize_row_q2_0(const float* x, block_q2_0* y, int64_t n) {
  for (int64_t i = 0; i < n / QK2_0; ++i, x += QK2_0) {
    float d = 0;
    for (int j = 0; j < QK2_0; ++j) d = std::fabs(x[j]) > d ? std::fabs(x[j]) : d;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int b = 0; b < QK2_0 / 4; ++b) {
      uint8_t q = 0;
      for (int k = 0; k < 4; ++k) q |= static_cast<uint8_t>(detail::clampi(static_cast<int>(std::round(x[4 * b + k] * id)) + 1, 0, 3) << (2 * k));
      y[i].qs[b] = q;
    }
  }
}

void quantize_row_tq1_0(const float* x, block_tq1_0* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    const float d = abs_max_of(x, QK_K);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    int t[5];
    for (int m = 0; m < 32; ++m) {
      for (int k = 0; k < 5; ++k) t[k] = trit(x[32 * k + m], id);
      y[i].qs[m] = pack_trits(t);
    }
    for (int m = 0; m < 16; ++m) {
      for (int k = 0; k < 5; ++k) t[k] = trit(x[160 + 16 * k + m], id);
      y[i].qs[32 + m] = pack_trits(t);
    }
    for (int m = 0; m < 4; ++m) {
      for (int k = 0; k < 4; ++k) t[k] = trit(x[240 + 4 * k + m], id);
      t[4] = 0;
      y[i].qh[m] = pack_trits(t);
    }
  }
}

// Element 32c + m of each 128-element half h is bits 2(c % 4) of qs[32h + m]: Q2_K's order.
void quantize_row_tq2_0(const float* x, block_tq2_0* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    const float d = abs_max_of(x, QK_K);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = fp32_to_fp16(d);
    for (int h = 0; h < 2; ++h)
      for (int m = 0; m < 32; ++m) {
        uint8_t q = 0;
        for (int k = 0; k < 4; ++k) q |= static_cast<uint8_t>((trit(x[128 * h + 32 * k + m], id) & 3) << (2 * k));
        y[i].qs[32 * h + m] = q;
      }
  }
}

}  // namespace k3::ref
