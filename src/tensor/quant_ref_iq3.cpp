// IQ3_XXS and IQ3_S (docs/formats.md): 4 elements share one entry of a grid of magnitudes
// (iq3_grids.h, 256 and 512 entries), signs apart; dequantization and ggml's quantizers, with and
// without an importance matrix, byte for byte (their search, its neighbour tables and its quirks).
#include <algorithm>
#include <array>
#include <bit>
#include <cfloat>
#include <vector>

#include "tensor/fp16.h"
#include "tensor/iq3_grids.h"
#include "tensor/quant_ref.h"
#include "tensor/quant_ref_impl.h"

namespace k3::ref {

using namespace detail;

namespace {

// The 8-bit sign pattern of 8 elements from IQ3_XXS's 7 stored bits: bit 7 makes the count even.
uint8_t even_signs(uint32_t s7) { return static_cast<uint8_t>(s7 | (__builtin_popcount(s7) & 1) << 7); }

// The quantizer's view of a grid (ggml's iq3xs_init_impl): each entry as 4 levels l in 0..7 (value
// 2l + 1 in the search), a map from every 12-bit point of 4 levels to its entry, and for each point
// off the grid its neighbours: the entries nearest it (squared distance in 2l + 1 units), all of
// those at the first `want` distinct distances, by distance then index.
struct Iq3Grid {
  std::vector<std::array<int8_t, 4>> q;  // 2l + 1 per element
  std::vector<int> map;                   // entry, or -1 off the grid
  std::vector<std::vector<uint16_t>> neighbours;

  Iq3Grid(const uint32_t* grid, int size, int want, int unit) : q(size), map(4096, -1), neighbours(4096) {
    for (int k = 0; k < size; ++k) {
      int point = 0;
      for (int i = 0; i < 4; ++i) {
        const int l = ((grid[k] >> (8 * i)) & 255) / unit;  // the grid byte's level
        q[k][i] = static_cast<int8_t>(2 * l + 1);
        point |= l << (3 * i);
      }
      map[point] = k;
    }
    std::vector<std::pair<int, int>> dist(size);
    for (int point = 0; point < 4096; ++point) {
      if (map[point] >= 0) continue;
      for (int k = 0; k < size; ++k) {
        int d2 = 0;
        for (int i = 0; i < 4; ++i) {
          const int diff = q[k][i] - (2 * ((point >> (3 * i)) & 7) + 1);
          d2 += diff * diff;
        }
        dist[k] = {d2, k};
      }
      std::sort(dist.begin(), dist.end());
      int have = 1;
      for (int k = 0; k < size; ++k) {
        if (dist[k].first > dist[0].first && dist[k].first != dist[k - 1].first && ++have > want) break;
        neighbours[point].push_back(static_cast<uint16_t>(dist[k].second));
      }
    }
  }

  // The neighbour of `point` nearest xval under weights w at `scale` (the first on a tie); its
  // levels into L.
  int best_neighbour(int point, const float* xval, const float* w, float scale, int8_t* L) const {
    float best = FLT_MAX;
    int index = -1;
    for (uint16_t k : neighbours[point]) {
      float d2 = 0;
      for (int i = 0; i < 4; ++i) {
        const float diff = scale * q[k][i] - xval[i];
        d2 += w[i] * diff * diff;
      }
      if (d2 < best) {
        best = d2;
        index = k;
      }
    }
    for (int i = 0; i < 4; ++i) L[i] = static_cast<int8_t>((q[index][i] - 1) / 2);
    return index;
  }
};

const Iq3Grid& grid_xxs() {
  static const Iq3Grid g(kIq3xxsGrid, 256, 2, 8);  // bytes 4, 12, ..., 52, 62: level = byte / 8
  return g;
}
const Iq3Grid& grid_s() {
  static const Iq3Grid g(kIq3sGrid, 512, 3, 2);  // bytes 1, 3, ..., 15: level = byte / 2
  return g;
}

int point_of(const int8_t* L) { return L[0] | L[1] << 3 | L[2] << 6 | L[3] << 9; }

int level(float v, float id) { return clampi(nearest_int(0.5f * (id * v - 1)), 0, 7); }

struct SumQ {
  float qx = 0, q2 = 0;
};
SumQ sums(const float* xval, const float* w, const int8_t* L) {
  SumQ s;
  for (int i = 0; i < 32; ++i) {
    const float q = static_cast<float>(2 * L[i] + 1);
    s.qx += w[i] * xval[i] * q;
    s.q2 += w[i] * q * q;
  }
  return s;
}

// The scale of one 32-element sub-block and its levels L (on the grid), as ggml searches them:
// trial inverse scales (15 + 0.2·is)/max for is in [-n_try, n_try], each point off the grid
// replaced by its best neighbour at the trial scale; the best least-squares fit kept; then the
// groups that were off the grid (IQ3_S: every group, when any was) requantized at that scale and
// the scale refitted. xval: |x| (IQ3_XXS: one element possibly negated), weights w, sqrt(w) sw.
float iq3_subblock(const Iq3Grid& g, int n_try, bool redo_all, float max, const float* xval, const float* w,
                   const float* sw, int8_t* L) {
  float best = 0, scale = max / 15;
  bool on_grid[8], on_grid_try[8];
  std::fill(on_grid, on_grid + 8, !redo_all);
  int8_t Lt[32];
  for (int is = -n_try; is <= n_try; ++is) {
    const float id = (15 + is * 0.2f) / max;
    const float this_scale = 1 / id;
    for (int k = 0; k < 8; ++k) {
      for (int i = 0; i < 4; ++i) Lt[4 * k + i] = static_cast<int8_t>(level(xval[4 * k + i], id));
      const int point = point_of(Lt + 4 * k);
      on_grid_try[k] = g.map[point] >= 0;
      if (!on_grid_try[k]) g.best_neighbour(point, xval + 4 * k, sw + 4 * k, this_scale, Lt + 4 * k);
    }
    const SumQ s = sums(xval, w, Lt);
    if (s.q2 > 0 && s.qx * s.qx > best * s.q2) {
      scale = s.qx / s.q2;
      best = scale * s.qx;
      std::copy(Lt, Lt + 32, L);
      std::copy(on_grid_try, on_grid_try + 8, on_grid);
    }
  }
  if (std::count(on_grid, on_grid + 8, false) > 0 && scale > 0) {
    const float id = 1 / scale;
    for (int k = 0; k < 8; ++k) {
      if (on_grid[k] && !redo_all) continue;
      int8_t* Lk = L + 4 * k;
      for (int i = 0; i < 4; ++i) Lk[i] = static_cast<int8_t>(level(xval[4 * k + i], id));
      const int point = point_of(Lk);
      const int index = g.map[point] >= 0 ? g.map[point] : g.best_neighbour(point, xval + 4 * k, sw + 4 * k, scale, Lk);
      for (int i = 0; i < 4; ++i) Lk[i] = static_cast<int8_t>((g.q[index][i] - 1) / 2);
    }
    const SumQ s = sums(xval, w, L);
    if (s.q2 > 0) scale = s.qx / s.q2;
  }
  return scale;
}

// σ² of a super-block, 2·Σx²/256.
float sigma2_of(const float* xbl) {
  float sumx2 = 0;
  for (int i = 0; i < QK_K; ++i) sumx2 += xbl[i] * xbl[i];
  return 2 * sumx2 / QK_K;
}

// One sub-block of 32 elements, as both quantizers open it: the weights w (qw·sqrt(σ² + x²) with
// an importance matrix, else x²) and their square roots, the magnitudes and, per 8 elements, the
// sign bits (bit i set where x_i is not ≥ 0).
struct SubBlock {
  float w[32], sw[32], xval[32];
  uint8_t signs[4];
  SubBlock(float sigma2, const float* xb, const float* qw) {
    for (int i = 0; i < 32; ++i) w[i] = qw ? qw[i] * std::sqrt(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
    for (int i = 0; i < 32; ++i) sw[i] = std::sqrt(w[i]);
    for (int k = 0; k < 4; ++k) {
      signs[k] = 0;
      for (int i = 8 * k; i < 8 * k + 8; ++i) {
        xval[i] = xb[i] >= 0 ? xb[i] : -xb[i];
        if (!(xb[i] >= 0)) signs[k] |= static_cast<uint8_t>(1 << (i - 8 * k));
      }
    }
  }
};

float max_of(const float* xval) {
  float max = xval[0];
  for (int i = 1; i < 32; ++i) max = max > xval[i] ? max : xval[i];
  return max;
}

void quantize_block_iq3_xxs(const float* xbl, block_iq3_xxs& y, const float* qw) {
  const Iq3Grid& g = grid_xxs();
  uint8_t* idx = y.qs;
  uint32_t sas[8] = {};  // per sub-block: 4 x 7 sign bits, scale in bits 28-31
  std::fill(y.qs, y.qs + 64, 0);
  float scales[8], max_scale = 0;
  const float sigma2 = sigma2_of(xbl);
  for (int ib = 0; ib < 8; ++ib) {
    const float* xb = xbl + 32 * ib;
    SubBlock b(sigma2, xb, qw ? qw + 32 * ib : nullptr);
    const float *w = b.w, *sw = b.sw;
    float* xval = b.xval;
    uint8_t* signs = b.signs;
    for (int k = 0; k < 4; ++k) {
      if (std::popcount(signs[k]) % 2) {  // an odd count: the element of least w·x² takes the other sign
        int imin = 0;
        float min = w[8 * k] * xb[8 * k] * xb[8 * k];
        for (int i = 1; i < 8; ++i) {
          const float ax = w[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
          if (ax < min) min = ax, imin = i;
        }
        xval[8 * k + imin] = -xval[8 * k + imin];
        signs[k] ^= static_cast<uint8_t>(1 << imin);
      }
      signs[k] &= 127;
    }
    const float max = max_of(xval);
    if (max < 1e-8f) {
      scales[ib] = 0;
      continue;
    }
    int8_t L[32] = {};
    float scale = iq3_subblock(g, 15, false, max, xval, w, sw, L);
    if (scale < 0) {
      scale = -scale;
      for (int k = 0; k < 4; ++k) signs[k] = ~signs[k] & 127;
    }
    for (int k = 0; k < 8; ++k) idx[8 * ib + k] = static_cast<uint8_t>(g.map[point_of(L + 4 * k)]);
    sas[ib] = signs[0] | signs[1] << 7 | signs[2] << 14 | static_cast<uint32_t>(signs[3]) << 21;
    scales[ib] = scale;
    max_scale = max_scale > scale ? max_scale : scale;
  }
  if (!max_scale) {
    y.d = 0;
    std::fill(y.qs, y.qs + sizeof(y.qs), 0);
    return;
  }
  const float d = max_scale / 31;
  y.d = fp32_to_fp16(d * 1.0125f);
  const float id = 1 / d;
  for (int ib = 0; ib < 8; ++ib) {
    sas[ib] |= static_cast<uint32_t>(clampi(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15)) << 28;
    std::memcpy(y.qs + 64 + 4 * ib, &sas[ib], 4);
  }
}

// As ggml writes it: the low index bytes and sign bytes of a sub-block go where the last
// non-zero sub-block's ended, so after an all-zero sub-block (max |x| = 0, written nothing) the
// later ones sit one sub-block early; the ninth index bits and the scales keep their places.
void quantize_block_iq3_s(const float* xbl, block_iq3_s& y, const float* qw) {
  const Iq3Grid& g = grid_s();
  std::memset(&y, 0, sizeof(y));
  uint8_t *qs = y.qs, *signs = y.signs;
  float scales[8], max_scale = 0;
  const float sigma2 = sigma2_of(xbl);
  for (int ib = 0; ib < 8; ++ib) {
    const float* xb = xbl + 32 * ib;
    SubBlock b(sigma2, xb, qw ? qw + 32 * ib : nullptr);
    const float *w = b.w, *sw = b.sw, *xval = b.xval;
    uint8_t* bsigns = b.signs;
    const float max = max_of(xval);
    if (!max) {
      scales[ib] = 0;
      continue;
    }
    int8_t L[32] = {};
    float scale = iq3_subblock(g, 9, true, max, xval, w, sw, L);
    if (scale < 0) {
      scale = -scale;
      for (int k = 0; k < 4; ++k) bsigns[k] = static_cast<uint8_t>(~bsigns[k]);
    }
    for (int k = 0; k < 8; ++k) {
      const int index = g.map[point_of(L + 4 * k)];
      qs[k] = static_cast<uint8_t>(index & 255);
      y.qh[ib] |= static_cast<uint8_t>((index >> 8) << k);
    }
    qs += 8;
    std::copy(bsigns, bsigns + 4, signs);
    signs += 4;
    scales[ib] = scale;
    max_scale = max_scale > scale ? max_scale : scale;
  }
  if (!max_scale) return;
  const float d = max_scale / 31;
  y.d = fp32_to_fp16(d * 1.033f);
  const float id = 1 / d;
  for (int ib = 0; ib < 8; ib += 2) {
    const int l1 = clampi(nearest_int(0.5f * (id * scales[ib] - 1)), 0, 15);
    const int l2 = clampi(nearest_int(0.5f * (id * scales[ib + 1] - 1)), 0, 15);
    y.scales[ib / 2] = static_cast<uint8_t>(l1 | l2 << 4);
  }
}

}  // namespace

void dequantize_row_iq3_xxs(const block_iq3_xxs* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t sas;
      std::memcpy(&sas, x[i].qs + 64 + 4 * ib, 4);
      const float db = d * (0.5f + static_cast<float>(sas >> 28)) * 0.5f;
      for (int k = 0; k < 4; ++k) {
        const uint8_t signs = even_signs((sas >> (7 * k)) & 127);
        for (int h = 0; h < 2; ++h) {
          const uint32_t e = kIq3xxsGrid[x[i].qs[8 * ib + 2 * k + h]];
          for (int j = 0; j < 4; ++j, ++y) {
            const float v = db * static_cast<float>((e >> (8 * j)) & 255);
            *y = signs >> (4 * h + j) & 1 ? -v : v;
          }
        }
      }
    }
  }
}

void dequantize_row_iq3_s(const block_iq3_s* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib) {
      const float db = d * static_cast<float>(1 + 2 * ((x[i].scales[ib / 2] >> (4 * (ib % 2))) & 15));
      for (int k = 0; k < 8; ++k) {
        const uint32_t e = kIq3sGrid[x[i].qs[8 * ib + k] | ((x[i].qh[ib] >> k) & 1) << 8];
        const uint8_t signs = x[i].signs[4 * ib + k / 2];
        for (int j = 0; j < 4; ++j, ++y) {
          const float v = db * static_cast<float>((e >> (8 * j)) & 255);
          *y = signs >> (4 * (k % 2) + j) & 1 ? -v : v;
        }
      }
    }
  }
}

void quantize_row_iq3_xxs(const float* x, block_iq3_xxs* y, int64_t n, const float* qw) {
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_block_iq3_xxs(x + i * QK_K, y[i], qw ? qw + i * QK_K : nullptr);
}

void quantize_row_iq3_s(const float* x, block_iq3_s* y, int64_t n, const float* qw) {
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_block_iq3_s(x + i * QK_K, y[i], qw ? qw + i * QK_K : nullptr);
}

}  // namespace k3::ref
