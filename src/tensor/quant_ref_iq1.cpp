// The lattice types IQ1_S and IQ1_M (docs/formats.md): groups of 8 values are a grid entry of
// levels {-1, 0, 1} shifted by ±1/8, times a scale per 32 (IQ1_S) or 16 (IQ1_M) values.
#include <algorithm>
#include <cfloat>

#include "common/error.h"
#include "tensor/fp16.h"
#include "tensor/iq_grids.h"
#include "tensor/quant_ref.h"
#include "tensor/quant_ref_impl.h"

namespace k3::ref {

using namespace detail;

namespace {

constexpr float kDelta = 0.125f;  // IQ1S_DELTA = IQ1M_DELTA
constexpr float GROUP_MAX_EPS_IQ1_S = 1e-12f, GROUP_MAX_EPS_IQ1_M = 1e-7f;
// The three shifted levels of each shift sign: x_p = level − 1 + 1/8, x_m = level − 1 − 1/8.
constexpr float kXp[3] = {-1 + kDelta, kDelta, 1 + kDelta};
constexpr float kXm[3] = {-1 - kDelta, -kDelta, 1 - kDelta};

// Value j (−1, 0, 1) of a grid entry of levels.
inline int grid_value(uint64_t g, int j) { return static_cast<int>((g >> (8 * j)) & 255) - 1; }

// The values of a block ordered ascending, ties in their original order (glibc's qsort, which
// ggml calls, is a stable merge sort on Debian 12).
template <int N>
void sort_order(const float* x, int* idx) {
  for (int j = 0; j < N; ++j) {
    int k = j;
    for (; k > 0 && x[idx[k - 1]] > x[j]; --k) idx[k] = idx[k - 1];
    idx[k] = j;
  }
}

// Levels from the two split points of the sorted order: below i1 level 0, below i2 level 1, else 2.
template <int N>
void split_levels(const int* idx, int i1, int i2, int8_t* L) {
  for (int j = 0; j < N; ++j) L[idx[j]] = static_cast<int8_t>(j < i1 ? 0 : j < i2 ? 1 : 2);
}

// Moves every 8-value group of a block onto the grid (xx(g): the shifted levels of group g);
// returns whether all were on it, index[g] the entries.
template <int N, class XX>
bool onto_grid(const Lattice& lat, const float* xb, const float* weight, float scale, XX&& xx, int8_t* L, uint16_t* index) {
  bool all = true;
  for (int g = 0; g < N / 8; ++g) {
    const uint16_t u = lattice_code(L + 8 * g);
    int gi = lat.index(u);
    if (gi < 0) {
      all = false;
      gi = lat.nearest_neighbour(u, xb + 8 * g, weight + 8 * g, scale, xx(g), L + 8 * g);
    }
    index[g] = static_cast<uint16_t>(gi);
  }
  return all;
}

// The least-squares scale of grid entries index[] (levels standing for xx(g)), when positive.
template <int N, class XX>
void refit_scale(const Lattice& lat, const float* xb, const float* weight, const uint16_t* index, XX&& xx, float& scale) {
  float sumqx = 0, sumq2 = 0;
  for (int g = 0; g < N / 8; ++g)
    for (int j = 0; j < 8; ++j) {
      const float w = weight[8 * g + j], q = xx(g)[lat.level(index[g], j)];
      sumqx += w * q * xb[8 * g + j];
      sumq2 += w * q * q;
    }
  if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
}

float super_sigma2(const float* x) {
  float sumx2 = 0;
  for (int i = 0; i < QK_K; ++i) sumx2 += x[i] * x[i];
  return 2 * sumx2 / QK_K;
}

void iq1_weights(const float* x, const float* qw, float sigma2, int n, float* w) {
  for (int i = 0; i < n; ++i) w[i] = qw ? qw[i] * std::sqrt(sigma2 + x[i] * x[i]) : x[i] * x[i];
}

float abs_peak(const float* x, int n) {
  float max = std::fabs(x[0]);
  for (int i = 1; i < n; ++i) max = max > std::fabs(x[i]) ? max : std::fabs(x[i]);
  return max;
}

// Scale code of a block: round((scale/d - 1)/2) in 0-7.
int scale_code(float id, float scale) { return clampi(nearest_int(0.5f * (id * scale - 1)), 0, 7); }

void quantize_block_iq1_s(const Lattice& lat, const float* x, block_iq1_s& y, const float* qw) {
  constexpr int N = 32;
  std::memset(&y, 0, sizeof y);
  const float sigma2 = super_sigma2(x);
  float scales[8], max_scale = 0;
  int shifts[8];
  for (int ib = 0; ib < 8; ++ib) {
    const float* xb = x + N * ib;
    float weight[N];
    iq1_weights(xb, qw + N * ib, sigma2, N, weight);
    scales[ib] = 0, shifts[ib] = 1;
    if (abs_peak(xb, N) < GROUP_MAX_EPS_IQ1_S) continue;
    // Exhaustive over the two split points of the sorted values, both shift signs (prefix sums
    // of w·x and w in sorted order).
    int idx[N];
    sort_order<N>(xb, idx);
    float sumx[N + 1], sumw[N + 1];
    sumx[0] = sumw[0] = 0;
    for (int j = 0; j < N; ++j) {
      sumx[j + 1] = sumx[j] + weight[idx[j]] * xb[idx[j]];
      sumw[j + 1] = sumw[j] + weight[idx[j]];
    }
    float best_score = -FLT_MAX, scale = abs_peak(xb, N);
    int besti1 = -1, besti2 = -1, best_shift = 0;
    for (int i1 = 0; i1 <= N; ++i1)
      for (int i2 = i1; i2 <= N; ++i2)
        for (const int shift : {1, -1}) {
          const float* v = shift == 1 ? kXp : kXm;
          const float sumqx = (sumx[i1] - sumx[0]) * v[0] + (sumx[i2] - sumx[i1]) * v[1] + (sumx[N] - sumx[i2]) * v[2];
          const float sumq2 = (sumw[i1] - sumw[0]) * v[0] * v[0] + (sumw[i2] - sumw[i1]) * v[1] * v[1] +
                              (sumw[N] - sumw[i2]) * v[2] * v[2];
          if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
            scale = sumqx / sumq2;
            best_score = scale * sumqx;
            besti1 = i1, besti2 = i2, best_shift = shift;
          }
        }
    if (besti1 < 0 || besti2 < 0 || best_shift == 0) continue;
    int8_t L[N];
    split_levels<N>(idx, besti1, besti2, L);
    if (scale < 0) {
      for (int8_t& l : L) l = static_cast<int8_t>(2 - l);
      scale = -scale, best_shift = -best_shift;
    }
    const float* xx = best_shift == 1 ? kXp : kXm;
    auto levels = [xx](int) { return xx; };
    uint16_t index[N / 8];
    if (!onto_grid<N>(lat, xb, weight, scale, levels, L, index)) refit_scale<N>(lat, xb, weight, index, levels, scale);
    uint16_t h = 0;
    for (int g = 0; g < N / 8; ++g) {
      y.qs[4 * ib + g] = static_cast<uint8_t>(index[g] & 255);
      h = static_cast<uint16_t>(h | (index[g] >> 8) << (3 * g));
    }
    y.qh[ib] = h;
    scales[ib] = scale, shifts[ib] = best_shift;
    max_scale = max_scale > scale ? max_scale : scale;
  }
  if (!max_scale) return;
  const float d = max_scale / 15;
  y.d = fp32_to_fp16(d * 1.125f);
  const float id = 1 / d;
  for (int ib = 0; ib < 8; ++ib) {
    const int l = scale_code(id, scales[ib]) | (shifts[ib] == -1 ? 8 : 0);
    y.qh[ib] = static_cast<uint16_t>(y.qh[ib] | l << 12);
  }
}

void quantize_block_iq1_m(const Lattice& lat, const float* x, block_iq1_m& y, const float* qw) {
  constexpr int N = 16;
  std::memset(&y, 0, sizeof y);
  const float sigma2 = super_sigma2(x);
  float scales[16], max_scale = 0;
  int shifts[16];  // bit 1: the first 8 values take x_m, bit 0: the second 8
  for (int ib = 0; ib < 16; ++ib) {
    const float* xb = x + N * ib;
    float weight[N];
    iq1_weights(xb, qw ? qw + N * ib : nullptr, sigma2, N, weight);
    scales[ib] = 0, shifts[ib] = 0;
    if (abs_peak(xb, N) < GROUP_MAX_EPS_IQ1_M) continue;
    int idx[N];
    sort_order<N>(xb, idx);
    // Prefix sums per half of the block (each half has its own shift sign). As the levels step by 1
    // under both signs, a split's Σ w·q·x is T·v[2] − px[i1] − px[i2] per half.
    float px[2][N + 1], pw[2][N + 1];
    px[0][0] = px[1][0] = pw[0][0] = pw[1][0] = 0;
    for (int j = 0; j < N; ++j) {
      const int i = idx[j], h = i < N / 2 ? 0 : 1;
      px[h][j + 1] = px[h][j] + weight[i] * xb[i];
      px[1 - h][j + 1] = px[1 - h][j];
      pw[h][j + 1] = pw[h][j] + weight[i];
      pw[1 - h][j + 1] = pw[1 - h][j];
    }
    const float txs[2] = {px[0][N], px[1][N]}, tws[2] = {pw[0][N], pw[1][N]};
    const float p2 = kXp[2], m2 = kXm[2];
    const float cp1 = kXp[0] * kXp[0] - kXp[1] * kXp[1], cp2 = kXp[1] * kXp[1] - kXp[2] * kXp[2];
    const float cm1 = kXm[0] * kXm[0] - kXm[1] * kXm[1], cm2 = kXm[1] * kXm[1] - kXm[2] * kXm[2];
    float best_score = -FLT_MAX, scale = abs_peak(xb, N);
    int besti1 = -1, besti2 = -1, best_k = -1;
    for (int i1 = 0; i1 <= N; ++i1)
      for (int i2 = i1; i2 <= N; ++i2) {
        float qx_p[2], qx_m[2], q2_p[2], q2_m[2];
        for (int h = 0; h < 2; ++h) {
          const float sx = px[h][i1] + px[h][i2];
          qx_p[h] = txs[h] * p2 - sx;
          qx_m[h] = txs[h] * m2 - sx;
          q2_p[h] = tws[h] * p2 * p2 + pw[h][i1] * cp1 + pw[h][i2] * cp2;
          q2_m[h] = tws[h] * m2 * m2 + pw[h][i1] * cm1 + pw[h][i2] * cm2;
        }
        const float sumqx[4] = {qx_p[0] + qx_p[1], qx_p[0] + qx_m[1], qx_m[0] + qx_p[1], qx_m[0] + qx_m[1]};
        const float sumq2[4] = {q2_p[0] + q2_p[1], q2_p[0] + q2_m[1], q2_m[0] + q2_p[1], q2_m[0] + q2_m[1]};
        for (int k = 0; k < 4; ++k)
          if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
            scale = sumqx[k] / sumq2[k];
            best_score = scale * sumqx[k];
            besti1 = i1, besti2 = i2, best_k = k;
          }
      }
    if (besti1 < 0 || besti2 < 0 || best_k < 0) continue;
    int8_t L[N];
    split_levels<N>(idx, besti1, besti2, L);
    if (scale < 0) {
      for (int8_t& l : L) l = static_cast<int8_t>(2 - l);
      scale = -scale, best_k = 3 - best_k;
    }
    auto levels = [best_k](int g) { return (g == 0 ? best_k < 2 : best_k % 2 == 0) ? kXp : kXm; };
    uint16_t index[N / 8];
    if (!onto_grid<N>(lat, xb, weight, scale, levels, L, index)) refit_scale<N>(lat, xb, weight, index, levels, scale);
    y.qs[2 * ib] = static_cast<uint8_t>(index[0] & 255);
    y.qs[2 * ib + 1] = static_cast<uint8_t>(index[1] & 255);
    y.qh[ib] = static_cast<uint8_t>((index[0] >> 8) | (index[1] >> 8) << 4);
    scales[ib] = scale, shifts[ib] = best_k;
    max_scale = max_scale > scale ? max_scale : scale;
  }
  if (!max_scale) return;
  // The super-block scale is refitted to the coded scales, then stored in the top nibbles of the
  // four scale words.
  uint16_t sc[4] = {};
  float d = max_scale / 15;
  const float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  constexpr uint8_t kMasks[4] = {0x00, 0x80, 0x08, 0x88};
  for (int ib = 0; ib < 16; ++ib) {
    const int l = scale_code(id, scales[ib]);
    sc[ib / 4] = static_cast<uint16_t>(sc[ib / 4] | l << (3 * (ib % 4)));
    y.qh[ib] = static_cast<uint8_t>(y.qh[ib] | kMasks[shifts[ib]]);
    const float* xb = x + N * ib;
    float weight[N];
    iq1_weights(xb, qw ? qw + N * ib : nullptr, sigma2, N, weight);
    for (int g = 0; g < 2; ++g) {
      const float* xx = (g == 0 ? shifts[ib] < 2 : shifts[ib] % 2 == 0) ? kXp : kXm;
      const int k = y.qs[2 * ib + g] + ((y.qh[ib] << (8 - 4 * g)) & 0x700);
      for (int j = 0; j < 8; ++j) {
        const float w = weight[8 * g + j], q = xx[lat.level(k, j)] * static_cast<float>(2 * l + 1);
        sumqx += w * q * xb[8 * g + j];
        sumq2 += w * q * q;
      }
    }
  }
  if (sumq2 > 0) d = sumqx / sumq2;
  const uint16_t s = fp32_to_fp16(d * 1.1125f);
  sc[0] = static_cast<uint16_t>(sc[0] | (s & 0x000f) << 12);
  sc[1] = static_cast<uint16_t>(sc[1] | (s & 0x00f0) << 8);
  sc[2] = static_cast<uint16_t>(sc[2] | (s & 0x0f00) << 4);
  sc[3] = static_cast<uint16_t>(sc[3] | (s & 0xf000));
  std::memcpy(y.scales, sc, sizeof sc);
}

}  // namespace

void dequantize_row_iq1_s(const block_iq1_s* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t qh = x[i].qh[ib];
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = qh & 0x8000 ? -kDelta : kDelta;
      for (int g = 0; g < 4; ++g, y += 8) {
        const uint64_t grid = kIqGrids.iq1s[x[i].qs[4 * ib + g] | (((qh >> (3 * g)) & 7) << 8)];
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(grid_value(grid, j)) + delta);
      }
    }
  }
}

// The f16 super-block scale of an IQ1_M block, from the top nibbles of its four scale words.
uint16_t iq1_m_scale(const block_iq1_m& b) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, sizeof sc);
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}

void dequantize_row_iq1_m(const block_iq1_m* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint16_t sc[4];
    std::memcpy(sc, x[i].scales, sizeof sc);
    const float d = fp16_to_fp32(iq1_m_scale(x[i]));
    for (int ib = 0; ib < 8; ++ib) {
      const float dl[2] = {d * static_cast<float>(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1),
                           d * static_cast<float>(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1)};
      for (int g = 0; g < 4; ++g, y += 8) {
        const uint8_t qh = x[i].qh[2 * ib + g / 2];
        const int hi = g % 2 ? (qh << 4) & 0x700 : (qh << 8) & 0x700;
        const float delta = qh & (g % 2 ? 0x80 : 0x08) ? -kDelta : kDelta;
        const uint64_t grid = kIqGrids.iq1s[x[i].qs[4 * ib + g] | hi];
        for (int j = 0; j < 8; ++j) y[j] = dl[g / 2] * (static_cast<float>(grid_value(grid, j)) + delta);
      }
    }
  }
}

void quantize_row_iq1_s(const float* x, block_iq1_s* y, int64_t n, const float* qw) {
  require_imatrix(GgmlType::IQ1_S, qw);
  const Lattice& lat = lattice(GgmlType::IQ1_S);
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_block_iq1_s(lat, x + i * QK_K, y[i], qw + i * QK_K);
}

void quantize_row_iq1_m(const float* x, block_iq1_m* y, int64_t n, const float* qw) {
  const Lattice& lat = lattice(GgmlType::IQ1_M);
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_block_iq1_m(lat, x + i * QK_K, y[i], qw ? qw + i * QK_K : nullptr);
}

}  // namespace k3::ref
