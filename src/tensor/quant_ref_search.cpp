// The scale-search routines of the K-quants and the weighted legacy paths (quant-formats.md §6.1).
// Every expression keeps the spec's left-to-right order: w*l*l is (w*l)*l.
#include <algorithm>

#include "common/error.h"
#include "tensor/quant_ref_impl.h"

namespace k3::ref::detail {

namespace {
inline float err(float t, bool use_mad) { return use_mad ? std::fabs(t) : t * t; }
}  // namespace

float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, float rmin,
                       float rdelta, int nstep, bool use_mad) {
  K3_ASSERT(n <= 32);
  float min = x[0], max = x[0];
  float sum_w = 0, sum_x = 0;
  for (int i = 0; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, n);
    *min_out = -min;
    return 0.f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(clampi(nearest_int(iscale * (x[i] - min)), 0, nmax));
    best += w[i] * err(scale * L[i] + min - x[i], use_mad);
  }
  if (nstep < 1) {
    *min_out = -min;
    return scale;
  }
  uint8_t La[32];
  for (int is = 0; is <= nstep; ++is) {
    // `min` is the current one: an accepted step moves the grid of all later steps.
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sl = 0, sl2 = 0, sxl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
      La[i] = static_cast<uint8_t>(l);
      sl += w[i] * l;
      sl2 += w[i] * l * l;
      sxl += w[i] * l * x[i];
    }
    const float D = sum_w * sl2 - sl * sl;
    if (!(D > 0)) continue;
    float this_scale = (sum_w * sxl - sum_x * sl) / D;
    float this_min = (sl2 * sum_x - sl * sxl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sxl / sl2;
    }
    float cur = 0;
    for (int i = 0; i < n; ++i) cur += w[i] * err(this_scale * La[i] + this_min - x[i], use_mad);
    if (cur < best) {
      std::memcpy(L, La, n);
      best = cur;
      scale = this_scale;
      min = this_min;
    }
  }
  *min_out = -min;
  return scale;
}

float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  const AbsMax m = abs_max(x, n);
  if (m.amax < GROUP_MAX_EPS) {
    std::memset(L, 0, n);
    return 0.f;
  }
  const float iscale = -nmax / m.max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * L[i] * L[i];
      const int nl = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (nl == L[i]) continue;
      slx += w * x[i] * nl;
      sl2 += w * nl * nl;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(nl);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0 ? sumlx / suml2 : 0.f;
}

float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* qw) {
  const AbsMax m = abs_max(x, n);
  if (m.amax < GROUP_MAX_EPS) {
    std::memset(L, 0, n);
    return 0.f;
  }
  // Sums over the codes of one trial scale; writes the codes when L is given.
  auto trial = [&](float iscale, float& sumlx, float& suml2, int8_t* out) {
    sumlx = 0;
    suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      if (out) out[i] = static_cast<int8_t>(l + nmax);
      const float w = qw ? qw[i] : x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
  };
  float sumlx, suml2;
  trial(-nmax / m.max, sumlx, suml2, L);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(nmax + 0.1f * is) / m.max;
    trial(iscale, sumlx, suml2, nullptr);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      trial(iscale, sumlx, suml2, L);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* qw) {
  float max = 0;
  for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];
  if (max < GROUP_MAX_EPS) {
    std::memset(L, 0, n);
    return 0.f;
  }
  float iscale = nmax / max;
  const float scale = 1 / iscale;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));  // a negative code wraps (§2)
    const float diff = x[i] - scale * L[i];
    best += qw[i] * diff * diff;
  }
  for (int is = -4; is <= 4; ++is) {
    if (is == 0) continue;
    const float iscale_is = (0.1f * is + nmax) / max;
    const float scale_is = 1 / iscale_is;
    float mse = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
      const float diff = x[i] - scale_is * l;
      mse += qw[i] * diff * diff;
    }
    if (mse < best) {
      best = mse;
      iscale = iscale_is;
    }
  }
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::min(nmax, nearest_int(iscale * x[i]));
    L[i] = static_cast<uint8_t>(l);
    sumlx += qw[i] * x[i] * l;
    suml2 += qw[i] * l * l;
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      float slx = sumlx - qw[i] * x[i] * L[i];
      float sl2 = suml2 - qw[i] * L[i] * L[i];
      if (!(slx > 0 && sl2 > 0)) continue;
      const int nl = std::min(nmax, nearest_int(x[i] * sl2 / slx));
      if (nl == L[i]) continue;
      slx += qw[i] * x[i] * nl;
      sl2 += qw[i] * nl * nl;
      if (slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<uint8_t>(nl);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (!changed) break;
  }
  return suml2 > 0 ? sumlx / suml2 : 0.f;
}

}  // namespace k3::ref::detail
