// K-quants Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (256-element super-blocks) and the activation type Q8_K
// (quant-formats.md §6, §10). Weighted paths: §6.7.
#include <algorithm>
#include <cmath>

#include "tensor/fp16.h"
#include "tensor/quant_ref.h"
#include "tensor/quant_ref_impl.h"

namespace k3::ref {

using namespace detail;

namespace {

// 2-bit codes of Q2_K and Q3_K: byte 32*half + l holds elements 128*half + l + 32*j at bits 2j.
inline int q2_code(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }
void pack_q2(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* q = L + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>(q[0] | q[32] << 2 | q[64] << 4 | q[96] << 6);
    }
}

// Q3_K 6-bit scale codes (already +32): low nibbles in bytes 0-7, high 2 bits in bytes 8-11.
inline int q3_scale_code(const uint8_t* sc, int s) {
  const int lo = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
  return lo | ((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4;
}
void set_q3_scales(uint8_t* sc, const int* codes) {
  std::memset(sc, 0, 12);
  for (int s = 0; s < 16; ++s) {
    const int l = codes[s];
    if (s < 8)
      sc[s] = static_cast<uint8_t>(l & 15);
    else
      sc[s - 8] |= static_cast<uint8_t>((l & 15) << 4);
    sc[8 + s % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (s / 4)));
  }
}

// Q4_K / Q5_K 6-bit scale and min codes of sub-block j, packed in 12 bytes.
inline void k4_scale_min(const uint8_t* sc, int j, int& s, int& m) {
  if (j < 4) {
    s = sc[j] & 63;
    m = sc[j + 4] & 63;
  } else {
    s = (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
    m = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
  }
}
void set_k4_scales(uint8_t* sc, const uint8_t* ls, const uint8_t* lm) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = ls[j];
    sc[j + 4] = lm[j];
  }
  for (int j = 4; j < 8; ++j) {
    sc[j + 4] = static_cast<uint8_t>((ls[j] & 15) | (lm[j] & 15) << 4);
    sc[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
    sc[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
  }
}

// Importance weights qw_l*sqrt(sigma2 + x_l^2) of one sub-block and their sum.
float imatrix_weights(const float* x, const float* qw, float sigma2, int n, float* w) {
  float sw = 0;
  for (int l = 0; l < n; ++l) {
    w[l] = qw[l] * std::sqrt(sigma2 + x[l] * x[l]);
    sw += w[l];
  }
  return sw;
}
float sum_sq(const float* x, int n) {
  float s = 0;
  for (int l = 0; l < n; ++l) s += x[l] * x[l];
  return s;
}

// ---- Q2_K ----

void quantize_block_q2_K(const float* x, block_q2_K& y, const float* qw) {
  uint8_t L[QK_K];
  float sc[16], mn[16];
  if (!qw) {
    float w[16];
    float max_scale = 0, max_min = 0;
    for (int s = 0; s < 16; ++s) {
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * s + l]);
      sc[s] = make_qkx2_quants(16, 3, x + 16 * s, w, L + 16 * s, &mn[s], -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, sc[s]);
      max_min = std::max(max_min, mn[s]);
    }
    // Codes are stored in bytes: a (never expected) negative value wraps like ggml's.
    if (max_scale > 0) {
      const float iscale = 15 / max_scale;
      for (int s = 0; s < 16; ++s) y.scales[s] = static_cast<uint8_t>(nearest_int(iscale * sc[s]));
      y.d = fp32_to_fp16(max_scale / 15);
    } else {
      std::memset(y.scales, 0, 16);
      y.d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = 15 / max_min;
      for (int s = 0; s < 16; ++s) y.scales[s] |= static_cast<uint8_t>(nearest_int(iscale * mn[s]) << 4);
      y.dmin = fp32_to_fp16(max_min / 15);
    } else {
      y.dmin = fp32_to_fp16(0.f);
    }
  } else {
    const float sigma2 = sum_sq(x, QK_K) / QK_K;
    float w[16], sw[16];
    for (int s = 0; s < 16; ++s) {
      sw[s] = imatrix_weights(x + 16 * s, qw + 16 * s, sigma2, 16, w);
      sc[s] = make_qkx2_quants(16, 3, x + 16 * s, w, L + 16 * s, &mn[s], -0.9f, 0.05f, 36, false);  // make_qkx3_quants
    }
    uint8_t Ls[16], Lm[16];
    y.d = fp32_to_fp16(make_qp_quants(16, 15, sc, Ls, sw));
    y.dmin = fp32_to_fp16(make_qp_quants(16, 15, mn, Lm, sw));
    for (int s = 0; s < 16; ++s) y.scales[s] = static_cast<uint8_t>(Ls[s] | Lm[s] << 4);
  }
  // Re-quantize against the stored scales.
  const float d = fp16_to_fp32(y.d), dmin = fp16_to_fp32(y.dmin);
  for (int s = 0; s < 16; ++s) {
    const float dq = d * (y.scales[s] & 15);
    if (dq == 0) continue;
    const float dm = dmin * (y.scales[s] >> 4);
    for (int l = 0; l < 16; ++l)
      L[16 * s + l] = static_cast<uint8_t>(clampi(nearest_int((x[16 * s + l] + dm) / dq), 0, 3));
  }
  pack_q2(L, y.qs);
}

// ---- Q3_K ----

void quantize_block_q3_K(const float* x, block_q3_K& y, const float* qw) {
  int8_t L[QK_K];
  int codes[16];
  if (!qw) {
    float sc[16];
    float max_scale = 0, amax = 0;
    for (int s = 0; s < 16; ++s) {
      sc[s] = make_q3_quants(16, 4, x + 16 * s, L + 16 * s);
      if (std::fabs(sc[s]) > amax) {
        amax = std::fabs(sc[s]);
        max_scale = sc[s];
      }
    }
    if (max_scale != 0) {
      const float iscale = -32 / max_scale;
      for (int s = 0; s < 16; ++s) codes[s] = clampi(nearest_int(iscale * sc[s]), -32, 31) + 32;
      set_q3_scales(y.scales, codes);
      y.d = fp32_to_fp16(1 / iscale);
    } else {
      std::memset(y.scales, 0, 12);
      y.d = fp32_to_fp16(0.f);
    }
  } else {
    const float sigma2 = 2 * sum_sq(x, QK_K) / QK_K;
    float sc[16], w[16], sw[16];
    for (int s = 0; s < 16; ++s) {
      sw[s] = imatrix_weights(x + 16 * s, qw + 16 * s, sigma2, 16, w);
      sc[s] = make_qx_quants(16, 4, x + 16 * s, L + 16 * s, w);
    }
    int8_t Ls[16];
    const float d_block = make_qx_quants(16, 32, sc, Ls, sw);
    for (int s = 0; s < 16; ++s) codes[s] = Ls[s];
    set_q3_scales(y.scales, codes);
    y.d = fp32_to_fp16(d_block);
  }
  const float d = fp16_to_fp32(y.d);
  for (int s = 0; s < 16; ++s) {
    const float dq = d * static_cast<float>(q3_scale_code(y.scales, s) - 32);
    if (dq == 0) continue;
    for (int l = 0; l < 16; ++l)
      L[16 * s + l] = static_cast<int8_t>(clampi(nearest_int(x[16 * s + l] / dq), -4, 3) + 4);
  }
  // Codes 4..7 put their third bit in hmask: bit e/32 of hmask[e%32].
  std::memset(y.hmask, 0, sizeof y.hmask);
  uint8_t L2[QK_K];
  for (int e = 0; e < QK_K; ++e) {
    int l = L[e];
    if (l > 3) {
      y.hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
      l -= 4;
    }
    L2[e] = static_cast<uint8_t>(l);
  }
  pack_q2(L2, y.qs);
}

// ---- Q4_K / Q5_K: scales, mins and codes L in [0, nmax] of one super-block ----

// rmin, nstep: the reference search of make_qkx2_quants (the weighted path has its own).
void quantize_scales_k4(const float* x, int nmax, float rmin, int nstep, const float* qw, uint16_t& d16,
                        uint16_t& dmin16, uint8_t* scales, uint8_t* L) {
  float sc[8], mn[8], w[32];
  uint8_t ls[8], lm[8];
  if (!qw) {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      const float* xj = x + 32 * j;
      const float av = std::sqrt(sum_sq(xj, 32) / 32);
      for (int l = 0; l < 32; ++l) w[l] = av + std::fabs(xj[l]);
      sc[j] = make_qkx2_quants(32, nmax, xj, w, L + 32 * j, &mn[j], rmin, 0.1f, nstep, false);
      max_scale = std::max(max_scale, sc[j]);
      max_min = std::max(max_min, mn[j]);
    }
    const float inv_s = max_scale > 0 ? 63 / max_scale : 0.f;
    const float inv_m = max_min > 0 ? 63 / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
      // The byte conversion (wrapping a negative value) comes before the min (§2).
      ls[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_s * sc[j])));
      lm[j] = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_m * mn[j])));
    }
    d16 = fp32_to_fp16(max_scale / 63);
    dmin16 = fp32_to_fp16(max_min / 63);
  } else {
    const float sigma2 = 2 * sum_sq(x, QK_K) / QK_K;
    float sw[8];
    for (int j = 0; j < 8; ++j) {
      sw[j] = imatrix_weights(x + 32 * j, qw + 32 * j, sigma2, 32, w);
      sc[j] =
          make_qkx2_quants(32, nmax, x + 32 * j, w, L + 32 * j, &mn[j], -0.9f, 0.05f, 36, false);  // make_qkx3_quants
    }
    d16 = fp32_to_fp16(make_qp_quants(8, 63, sc, ls, sw));
    dmin16 = fp32_to_fp16(make_qp_quants(8, 63, mn, lm, sw));
  }
  set_k4_scales(scales, ls, lm);
  const float d = fp16_to_fp32(d16), dmin = fp16_to_fp32(dmin16);
  for (int j = 0; j < 8; ++j) {
    int s, m;
    k4_scale_min(scales, j, s, m);
    const float dq = d * s;
    if (dq == 0) continue;
    const float dm = dmin * m;
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = static_cast<uint8_t>(clampi(nearest_int((x[32 * j + l] + dm) / dq), 0, nmax));
  }
}

// ---- Q6_K ----

void quantize_block_q6_K(const float* x, block_q6_K& y, const float* qw) {
  int8_t L[QK_K];
  float sc[16];
  float max_scale = 0, amax = 0;
  for (int s = 0; s < 16; ++s) {
    // Weighted path: the raw importance values, no sigma2 term (§6.7).
    sc[s] = make_qx_quants(16, 32, x + 16 * s, L + 16 * s, qw ? qw + 16 * s : nullptr);
    if (std::fabs(sc[s]) > amax) {
      amax = std::fabs(sc[s]);
      max_scale = sc[s];
    }
  }
  if (amax < GROUP_MAX_EPS) {
    std::memset(&y, 0, sizeof y);
    return;
  }
  const float iscale = -128 / max_scale;
  y.d = fp32_to_fp16(1 / iscale);
  for (int s = 0; s < 16; ++s) y.scales[s] = static_cast<int8_t>(std::min(127, nearest_int(iscale * sc[s])));
  const float d = fp16_to_fp32(y.d);
  for (int s = 0; s < 16; ++s) {
    const float dq = d * y.scales[s];
    if (dq == 0) continue;
    for (int l = 0; l < 16; ++l)
      L[16 * s + l] = static_cast<int8_t>(clampi(nearest_int(x[16 * s + l] / dq), -32, 31) + 32);
  }
  for (int h = 0; h < 2; ++h) {
    const int8_t* q = L + 128 * h;
    uint8_t* ql = y.ql + 64 * h;
    uint8_t* qh = y.qh + 32 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((q[l] & 15) | (q[l + 64] & 15) << 4);
      ql[l + 32] = static_cast<uint8_t>((q[l + 32] & 15) | (q[l + 96] & 15) << 4);
      qh[l] = static_cast<uint8_t>((q[l] >> 4) | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
    }
  }
}

}  // namespace

// ---- dequantization ----

void dequantize_row_q2_K(const block_q2_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    for (int e = 0; e < QK_K; ++e) {
      const uint8_t sc = x[i].scales[e / 16];
      y[e] = d * (sc & 15) * q2_code(x[i].qs, e) - dmin * (sc >> 4);
    }
  }
}

void dequantize_row_q3_K(const block_q3_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
    const float d = fp16_to_fp32(x[i].d);
    for (int e = 0; e < QK_K; ++e) {
      const int hbit = (x[i].hmask[e % 32] >> (e / 32)) & 1;
      const int q = q2_code(x[i].qs, e) + 4 * hbit - 4;
      y[e] = d * static_cast<float>(q3_scale_code(x[i].scales, e / 16) - 32) * q;
    }
  }
}

void dequantize_row_q4_K(const block_q4_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    for (int e = 0; e < QK_K; ++e) {
      int s, m;
      k4_scale_min(x[i].scales, e / 32, s, m);
      const int r = e % 64;
      const uint8_t b = x[i].qs[32 * (e / 64) + r % 32];
      const int code = r < 32 ? b & 15 : b >> 4;
      y[e] = d * s * code - dmin * m;
    }
  }
}

// The same values as dequantize_row_q4_K, read from the lanes layout (blocks.h).
void dequantize_row_q4_K_lanes(const block_q4_Kl* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    for (int e = 0; e < QK_K; ++e)
      y[e] = d * q4kl_scale(x[i], e / 32) * q4kl_code(x[i], e / 32, e % 32) - dmin * q4kl_min(x[i], e / 32);
  }
}

void dequantize_row_q5_K(const block_q5_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
    const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
    for (int e = 0; e < QK_K; ++e) {
      int s, m;
      k4_scale_min(x[i].scales, e / 32, s, m);
      const int p = e / 64, r = e % 64, l = r % 32;
      const uint8_t b = x[i].qs[32 * p + l];
      const int hi = (x[i].qh[l] >> (2 * p + (r >= 32))) & 1;
      const int code = (r < 32 ? b & 15 : b >> 4) | hi << 4;
      y[e] = d * s * code - dmin * m;
    }
  }
}

void dequantize_row_q6_K(const block_q6_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
    const float d = fp16_to_fp32(x[i].d);
    for (int e = 0; e < QK_K; ++e) {
      const int half = e / 128, r = e % 128, g = r / 32, l = r % 32;
      const uint8_t b = x[i].ql[64 * half + l + 32 * (g & 1)];
      const int lo = g < 2 ? b & 15 : b >> 4;
      const int hi = (x[i].qh[32 * half + l] >> (2 * g)) & 3;
      y[e] = d * x[i].scales[e / 16] * ((lo | hi << 4) - 32);
    }
  }
}

void dequantize_row_q8_K(const block_q8_K* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K)
    for (int e = 0; e < QK_K; ++e) y[e] = x[i].d * x[i].qs[e];
}

// ---- quantization ----

void quantize_row_q2_K(const float* x, block_q2_K* y, int64_t n, const float* qw) {
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_block_q2_K(x + i * QK_K, y[i], qw ? qw + i * QK_K : nullptr);
}

void quantize_row_q3_K(const float* x, block_q3_K* y, int64_t n, const float* qw) {
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_block_q3_K(x + i * QK_K, y[i], qw ? qw + i * QK_K : nullptr);
}

void quantize_row_q4_K(const float* x, block_q4_K* y, int64_t n, const float* qw) {
  uint8_t L[QK_K];
  for (int64_t i = 0; i < n / QK_K; ++i) {
    quantize_scales_k4(x + i * QK_K, 15, -1.f, 20, qw ? qw + i * QK_K : nullptr, y[i].d, y[i].dmin, y[i].scales, L);
    for (int p = 0; p < 4; ++p)
      for (int l = 0; l < 32; ++l) y[i].qs[32 * p + l] = static_cast<uint8_t>(L[64 * p + l] | L[64 * p + 32 + l] << 4);
  }
}

void quantize_row_q5_K(const float* x, block_q5_K* y, int64_t n, const float* qw) {
  uint8_t L[QK_K];
  for (int64_t i = 0; i < n / QK_K; ++i) {
    quantize_scales_k4(x + i * QK_K, 31, -0.5f, 15, qw ? qw + i * QK_K : nullptr, y[i].d, y[i].dmin, y[i].scales, L);
    std::memset(y[i].qh, 0, sizeof y[i].qh);
    for (int p = 0; p < 4; ++p)
      for (int l = 0; l < 32; ++l) {
        const int a = L[64 * p + l], b = L[64 * p + 32 + l];
        y[i].qh[l] |= static_cast<uint8_t>((a >> 4) << (2 * p) | (b >> 4) << (2 * p + 1));
        y[i].qs[32 * p + l] = static_cast<uint8_t>((a & 15) | (b & 15) << 4);
      }
  }
}

void quantize_row_q6_K(const float* x, block_q6_K* y, int64_t n, const float* qw) {
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_block_q6_K(x + i * QK_K, y[i], qw ? qw + i * QK_K : nullptr);
}

void quantize_row_q8_K(const float* x, block_q8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    const AbsMax m = abs_max(x, QK_K);
    if (m.amax == 0) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, QK_K);
      continue;  // bsums not written, as in ggml
    }
    const float iscale = -127 / m.max;
    for (int e = 0; e < QK_K; ++e) y[i].qs[e] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[e])));
    for (int b = 0; b < 16; ++b) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * b + l];
      y[i].bsums[b] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

}  // namespace k3::ref
