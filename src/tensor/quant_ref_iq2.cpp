// The lattice types IQ2_XXS, IQ2_XS and IQ2_S (docs/formats.md), and the lattice search structure
// they share with IQ1_S and IQ1_M. Groups of 8 values are signs times a grid entry of levels
// {8, 25, 43}; the quantizers search in the doubled-and-shifted level space 1, 3, 5 (2·level + 1).
#include <algorithm>
#include <array>
#include <cfloat>
#include <mutex>
#include <type_traits>

#include "common/error.h"
#include "tensor/fp16.h"
#include "tensor/iq_grids.h"
#include "tensor/quant_ref.h"
#include "tensor/quant_ref_impl.h"

namespace k3::ref {

using namespace detail;

namespace detail {

Lattice::Lattice(const uint16_t* levels, int size, int nwant)
    : levels_(levels), size_(size), map_(kPatterns, -1), first_(kPatterns + 1, 0) {
  for (int k = 0; k < size; ++k) map_[levels[k]] = k;
  std::vector<int> d2(static_cast<size_t>(size));
  for (int u = 0; u < kPatterns; ++u) {
    first_[u + 1] = first_[u];
    bool valid = true;
    for (int i = 0; i < 8; ++i) valid = valid && ((u >> (2 * i)) & 3) != 3;
    if (map_[u] >= 0 || !valid) continue;  // patterns with a level 3 never occur
    // The nwant smallest distinct distances, then the entries at them in (distance, index) order.
    int best[3] = {INT32_MAX, INT32_MAX, INT32_MAX};
    for (int k = 0; k < size; ++k) {
      int s = 0;
      for (int i = 0; i < 8; ++i) {
        const int d = 2 * (level(k, i) - ((u >> (2 * i)) & 3));
        s += d * d;
      }
      d2[k] = s;
      for (int j = 0; j < nwant; ++j) {
        if (s == best[j]) break;
        if (s < best[j]) {
          for (int m = nwant - 1; m > j; --m) best[m] = best[m - 1];
          best[j] = s;
          break;
        }
      }
    }
    for (int j = 0; j < nwant && best[j] != INT32_MAX; ++j)
      for (int k = 0; k < size; ++k)
        if (d2[k] == best[j]) neigh_.push_back(static_cast<uint16_t>(k));
    first_[u + 1] = static_cast<uint32_t>(neigh_.size());
  }
}

int Lattice::nearest_neighbour(uint16_t u, const float* x, const float* w, float scale, const float* value,
                               int8_t* L) const {
  float best_d2 = FLT_MAX;
  const std::span<const uint16_t> nb = neighbours(u);
  int best = nb[0];  // ggml aborts or reads past the list when no distance is below FLT_MAX (NaN input)
  for (const uint16_t k : nb) {
    float d2 = 0;
    for (int i = 0; i < 8; ++i) {
      const float diff = scale * value[level(k, i)] - x[i];
      d2 += w[i] * diff * diff;
    }
    if (d2 < best_d2) {
      best_d2 = d2;
      best = k;
    }
  }
  for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>(level(best, i));
  return best;
}

const Lattice& lattice(GgmlType t) {
  static std::once_flag once[4];
  static const Lattice* made[4];
  int i;
  switch (t) {
    case GgmlType::IQ2_XXS: i = 0; break;
    case GgmlType::IQ2_XS: i = 1; break;
    case GgmlType::IQ2_S: i = 2; break;
    case GgmlType::IQ1_S: case GgmlType::IQ1_M: i = 3; break;
    default: fail("no lattice for type %s", type_name(t));
  }
  std::call_once(once[i], [i] {
    switch (i) {
      case 0: made[0] = new Lattice(iq::kIq2xxsLevels, 256, 2); break;
      case 1: made[1] = new Lattice(iq::kIq2xsLevels, 512, 2); break;
      case 2: made[2] = new Lattice(iq::kIq2sLevels, 1024, 1); break;
      default: made[3] = new Lattice(iq::kIq1sLevels, 2048, 3); break;
    }
  });
  return *made[i];
}

}  // namespace detail

namespace {

constexpr float GROUP_MAX_EPS_IQ2_S = 1e-8f;

// One 8-value group's value j of grid entry g, and the dequantized group.
inline int8_t grid_value(uint64_t g, int j) { return static_cast<int8_t>(g >> (8 * j)); }
void decode_group(uint64_t grid, uint8_t signs, float db, float* y) {
  for (int j = 0; j < 8; ++j) y[j] = db * static_cast<float>(grid_value(grid, j)) * ((signs >> j) & 1 ? -1.f : 1.f);
}

// IQ2_XS, IQ2_S: the scales of a 32-value sub-block's two halves, one 4-bit code each.
std::array<float, 2> half_scales(float d, uint8_t code) {
  return {d * (0.5f + static_cast<float>(code & 15)) * 0.25f, d * (0.5f + static_cast<float>(code >> 4)) * 0.25f};
}

// Levels of one group at inverse scale id: nearest point 2·level + 1, clamped to 0-2.
void round_group(const float* xval, float id, int8_t* L) {
  for (int i = 0; i < 8; ++i) L[i] = static_cast<int8_t>(clampi(nearest_int(0.5f * (id * xval[i] - 1)), 0, 2));
}

// Rounds a group at inverse scale id and moves it onto the grid (the best neighbour at `scale`
// when off it); returns whether it was on the grid already.
bool group_on_grid(const Lattice& lat, const float* xval, const float* w, float id, float scale, int8_t* L) {
  round_group(xval, id, L);
  const uint16_t u = lattice_code(L);
  if (lat.index(u) >= 0) return true;
  static constexpr float kPoint[3] = {1, 3, 5};  // 2·level + 1
  lat.nearest_neighbour(u, xval, w, scale, kPoint, L);
  return false;
}

// Weighted least-squares scale terms of levels L against xval.
void scale_terms(const float* xval, const float* weight, const int8_t* L, int n, float& sumqx, float& sumq2) {
  sumqx = sumq2 = 0;
  for (int i = 0; i < n; ++i) {
    const float w = weight[i], q = static_cast<float>(2 * L[i] + 1);
    sumqx += w * xval[i] * q;
    sumq2 += w * q * q;
  }
}

// Signs of one group of 8: xval = |x|; when `even`, an odd count of negatives flips back the value
// of least weight·x² (the stored 7 bits imply the 8th by parity). Returns the sign bits.
uint8_t group_signs(const float* x, const float* weight, bool even, float* xval) {
  int nflip = 0;
  uint8_t s = 0;
  for (int i = 0; i < 8; ++i) {
    if (x[i] >= 0) {
      xval[i] = x[i];
    } else {
      xval[i] = -x[i];
      ++nflip;
      s = static_cast<uint8_t>(s | 1 << i);
    }
  }
  if (even && nflip % 2) {
    int imin = 0;
    float min = weight[0] * x[0] * x[0];
    for (int i = 1; i < 8; ++i) {
      const float ax = weight[i] * x[i] * x[i];
      if (ax < min) {
        min = ax;
        imin = i;
      }
    }
    xval[imin] = -xval[imin];
    s = static_cast<uint8_t>(s ^ 1 << imin);
  }
  return s;
}

// The per-type part of the shared IQ2 search (kIq2: IQ2_XXS, IQ2_XS, IQ2_S).
struct Iq2Kind {
  int group;        // values per scale: 32 (XXS) or 16
  bool even_signs;  // 7 stored sign bits, the 8th by parity (XXS, XS)
  bool xxs;         // trials around make_qp_quants' scale, then every group rounded again (XXS)
  float eps;
  float sigma_mul;  // sigma2 = sigma_mul · mean x²
};
constexpr Iq2Kind kIq2[3] = {{32, true, true, GROUP_MAX_EPS, 1.f},
                             {16, true, false, GROUP_MAX_EPS, 1.f},
                             {16, false, false, GROUP_MAX_EPS_IQ2_S, 2.f}};

// One scale group (32 or 16 values) of an IQ2 super-block: its levels L, sign bytes and scale.
struct GroupResult {
  int8_t L[32];
  uint8_t signs[4];
  float scale;
};

// docs/formats.md, "IQ2_XXS, IQ2_XS, IQ2_S quantizers", steps 1-5. Returns false for a group ggml
// skips (its fields stay zero).
bool quantize_iq2_group(const Lattice& lat, const Iq2Kind& k, const float* xb, const float* weight, GroupResult& r) {
  const int n = k.group, ng = n / 8;
  const bool xxs = k.xxs;
  float xval[32] = {}, waux[32];
  for (int i = 0; i < n; ++i) waux[i] = std::sqrt(weight[i]);
  for (int g = 0; g < ng; ++g) r.signs[g] = group_signs(xb + 8 * g, weight + 8 * g, k.even_signs, xval + 8 * g);
  if (k.even_signs)
    for (int g = 0; g < ng; ++g) r.signs[g] &= 127;
  float max = xval[0];
  for (int i = 1; i < n; ++i) max = max > xval[i] ? max : xval[i];
  std::memset(r.L, 0, sizeof r.L);
  r.scale = 0;
  if (max < k.eps) return false;

  constexpr int kMaxQ = 3;
  int8_t Laux[32];
  bool on_grid[4] = {true, true, true, true}, on_aux[4];
  float best = 0, scale, eff_max;
  int is_lo, is_hi;
  if (xxs) {  // IQ2_XXS starts from make_qp_quants' scale and searches around its largest point
    uint8_t Lqp[32];
    scale = make_qp_quants(n, kMaxQ + 1, xval, Lqp, weight);
    for (int i = 0; i < n; ++i) r.L[i] = static_cast<int8_t>(Lqp[i]);
    eff_max = scale * kMaxQ;
    if (eff_max <= 0) {
      std::memset(r.L, 0, sizeof r.L);
      return false;
    }
    is_lo = -6, is_hi = 6;
  } else {
    scale = max / (2 * kMaxQ - 1);
    eff_max = max;
    is_lo = -9, is_hi = 9;
  }
  for (int is = is_lo; is <= is_hi; ++is) {
    const float id = (2 * kMaxQ - 1 + static_cast<float>(is) * 0.1f) / eff_max;
    const float this_scale = 1 / id;
    for (int g = 0; g < ng; ++g) on_aux[g] = group_on_grid(lat, xval + 8 * g, waux + 8 * g, id, this_scale, Laux + 8 * g);
    float sumqx, sumq2;
    scale_terms(xval, weight, Laux, n, sumqx, sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      scale = sumqx / sumq2;
      best = scale * sumqx;
      std::memcpy(r.L, Laux, n);
      std::copy(on_aux, on_aux + ng, on_grid);
    }
  }
  // Groups the best trial moved onto the grid are rounded again at the scale found (IQ2_XXS: all).
  bool redo = false;
  for (int g = 0; g < ng; ++g) redo = redo || xxs || !on_grid[g];
  if (redo && scale > 0) {
    const float id = 1 / scale;
    for (int g = 0; g < ng; ++g)
      if (xxs || !on_grid[g]) group_on_grid(lat, xval + 8 * g, waux + 8 * g, id, scale, r.L + 8 * g);
    float sumqx, sumq2;
    scale_terms(xval, weight, r.L, n, sumqx, sumq2);
    if (sumq2 > 0) scale = sumqx / sumq2;
  }
  if (scale < 0) {  // never expected; the scale is stored unsigned, so the signs flip instead
    scale = -scale;
    for (int g = 0; g < ng; ++g) r.signs[g] = static_cast<uint8_t>(k.even_signs ? ~r.signs[g] & 127 : ~r.signs[g]);
  }
  r.scale = scale;
  return true;
}

// Grid index of a group the search left on the grid (a NaN-poisoned search may not: index 0).
int final_index(const Lattice& lat, const int8_t* L) { return std::max(0, lat.index(lattice_code(L))); }

// The scale codes of one super-block: d = max_scale/31; code = round((scale/d - 1)/2) in 0-15.
// Returns false (and d = 0) when every scale is zero.
bool scale_codes(const float* scales, int n, float& d, int* codes) {
  float max_scale = 0;
  for (int i = 0; i < n; ++i) max_scale = max_scale > scales[i] ? max_scale : scales[i];
  if (!max_scale) return false;
  d = max_scale / 31;
  const float id = 1 / d;
  for (int i = 0; i < n; ++i) codes[i] = clampi(nearest_int(0.5f * (id * scales[i] - 1)), 0, 15);
  return true;
}

float super_sigma2(const float* x, float mul) {
  float sumx2 = 0;
  for (int i = 0; i < QK_K; ++i) sumx2 += x[i] * x[i];
  return mul * sumx2 / QK_K;
}

void iq2_weights(const float* x, const float* qw, float sigma2, int n, float* w) {
  for (int i = 0; i < n; ++i) w[i] = qw ? qw[i] * std::sqrt(sigma2 + x[i] * x[i]) : 0.25f * sigma2 + x[i] * x[i];
}

void quantize_block_iq2_xxs(const Lattice& lat, const float* x, block_iq2_xxs& y, const float* qw) {
  const Iq2Kind& k = kIq2[0];
  const float sigma2 = super_sigma2(x, k.sigma_mul);
  uint32_t q2[16] = {};
  float scales[8];
  for (int ib = 0; ib < 8; ++ib) {
    float weight[32];
    iq2_weights(x + 32 * ib, qw + 32 * ib, sigma2, 32, weight);
    GroupResult r;
    const bool kept = quantize_iq2_group(lat, k, x + 32 * ib, weight, r);
    scales[ib] = r.scale;
    if (!kept) continue;
    for (int g = 0; g < 4; ++g) {
      q2[2 * ib] |= static_cast<uint32_t>(final_index(lat, r.L + 8 * g)) << (8 * g);
      q2[2 * ib + 1] |= static_cast<uint32_t>(r.signs[g]) << (7 * g);
    }
  }
  float d = 0;
  int codes[8];
  y.d = fp32_to_fp16(0.f);
  if (!scale_codes(scales, 8, d, codes)) {
    std::memset(y.qs, 0, sizeof y.qs);
    return;
  }
  y.d = fp32_to_fp16(d);
  for (int ib = 0; ib < 8; ++ib) q2[2 * ib + 1] |= static_cast<uint32_t>(codes[ib]) << 28;
  std::memcpy(y.qs, q2, sizeof y.qs);
}

// IQ2_XS and IQ2_S: 16-value scale groups of two 8-value groups.
template <class Block>
void quantize_block_iq2_16(const Lattice& lat, const Iq2Kind& k, const float* x, Block& y, const float* qw) {
  constexpr bool kXs = std::is_same_v<Block, block_iq2_xs>;
  std::memset(&y, 0, sizeof y);
  const float sigma2 = super_sigma2(x, k.sigma_mul);
  float scales[16];
  for (int ib = 0; ib < 16; ++ib) {
    float weight[16];
    iq2_weights(x + 16 * ib, qw ? qw + 16 * ib : nullptr, sigma2, 16, weight);
    GroupResult r;
    const bool kept = quantize_iq2_group(lat, k, x + 16 * ib, weight, r);
    scales[ib] = r.scale;
    if (!kept) continue;
    for (int g = 0; g < 2; ++g) {
      const int gi = final_index(lat, r.L + 8 * g), i8 = 2 * ib + g;
      if constexpr (kXs) {
        y.qs[i8] = static_cast<uint16_t>(gi | r.signs[g] << 9);
      } else {
        y.qs[i8] = static_cast<uint8_t>(gi & 255);
        y.qh[i8 / 4] = static_cast<uint8_t>(y.qh[i8 / 4] | (gi >> 8) << (2 * (i8 % 4)));
        y.qs[QK_K / 8 + i8] = r.signs[g];
      }
    }
  }
  float d = 0;
  int codes[16];
  if (!scale_codes(scales, 16, d, codes)) {
    std::memset(y.qs, 0, sizeof y.qs);
    return;
  }
  y.d = fp32_to_fp16(kXs ? d : d * 0.9875f);
  for (int ib = 0; ib < 16; ++ib) y.scales[ib / 2] = static_cast<uint8_t>(y.scales[ib / 2] | codes[ib] << (4 * (ib % 2)));
}

}  // namespace

void dequantize_row_iq2_xxs(const block_iq2_xxs* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib, y += 32) {
      uint32_t aux[2];
      std::memcpy(aux, x[i].qs + 4 * ib, 8);
      const float db = d * (0.5f + static_cast<float>(aux[1] >> 28)) * 0.25f;
      for (int g = 0; g < 4; ++g)
        decode_group(kIqGrids.iq2xxs[(aux[0] >> (8 * g)) & 255], iq::kIqSigns[(aux[1] >> (7 * g)) & 127], db, y + 8 * g);
    }
  }
}

void dequantize_row_iq2_xs(const block_iq2_xs* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib, y += 32) {
      const std::array<float, 2> db = half_scales(d, x[i].scales[ib]);
      for (int g = 0; g < 4; ++g) {
        const uint16_t q = x[i].qs[4 * ib + g];
        decode_group(kIqGrids.iq2xs[q & 511], iq::kIqSigns[q >> 9], db[g / 2], y + 8 * g);
      }
    }
  }
}

void dequantize_row_iq2_s(const block_iq2_s* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    for (int ib = 0; ib < 8; ++ib, y += 32) {
      const std::array<float, 2> db = half_scales(d, x[i].scales[ib]);
      for (int g = 0; g < 4; ++g) {
        const int idx = x[i].qs[4 * ib + g] | ((x[i].qh[ib] << (8 - 2 * g)) & 0x300);
        decode_group(kIqGrids.iq2s[idx], x[i].qs[QK_K / 8 + 4 * ib + g], db[g / 2], y + 8 * g);
      }
    }
  }
}

void quantize_row_iq2_xxs(const float* x, block_iq2_xxs* y, int64_t n, const float* qw) {
  require_imatrix(GgmlType::IQ2_XXS, qw);
  const Lattice& lat = lattice(GgmlType::IQ2_XXS);
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_block_iq2_xxs(lat, x + i * QK_K, y[i], qw + i * QK_K);
}

void quantize_row_iq2_xs(const float* x, block_iq2_xs* y, int64_t n, const float* qw) {
  require_imatrix(GgmlType::IQ2_XS, qw);
  const Lattice& lat = lattice(GgmlType::IQ2_XS);
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_block_iq2_16(lat, kIq2[1], x + i * QK_K, y[i], qw + i * QK_K);
}

void quantize_row_iq2_s(const float* x, block_iq2_s* y, int64_t n, const float* qw) {
  const Lattice& lat = lattice(GgmlType::IQ2_S);
  for (int64_t i = 0; i < n / QK_K; ++i) quantize_block_iq2_16(lat, kIq2[2], x + i * QK_K, y[i], qw ? qw + i * QK_K : nullptr);
}

}  // namespace k3::ref
