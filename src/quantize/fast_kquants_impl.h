// SIMD K-quant quantizers, byte-identical to the reference (quant-formats.md §6, §6.7).
//
// Included once per ISA by fast_kquants_<isa>.cpp with K3_FAST_W (hardware float lanes: 8 or 16)
// and K3_FAST_NS (a namespace unique to that file) defined. The expensive part of every K-quant
// is a scale search over each sub-block of 16 or 32 elements: chains of float operations in
// index order. Here each SIMD lane runs the search of a different sub-block, so every lane does
// exactly the scalar operations in the scalar order and the results are bit-identical. Two
// vectors of lanes are searched together (H = 2) so that their accumulation chains overlap. The
// super-block assembly (scale codes, f16 rounding, re-quantization, packing) follows the spec.
// The file must be compiled with -ffp-contract=off: a fused a*b+c would change bits.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/quant_ref_search.h"

#if !defined(K3_FAST_W) || (K3_FAST_W != 8 && K3_FAST_W != 16)
#error "define K3_FAST_W (8 or 16) and K3_FAST_NS before including fast_kquants_impl.h"
#endif

// The gather intrinsics start from an "undefined" register, which GCC 12 reports as uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace k3::quant::K3_FAST_NS {
namespace {

constexpr int W = K3_FAST_W;  // lanes per vector
constexpr int H = 2;          // vectors searched together
constexpr int B = W * H;      // sub-blocks per batch
typedef float vf __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));

inline vf splat(float f) { return vf{} + f; }
inline vi bits(vf v) { return (vi)v; }  // same-size vector casts reinterpret the bits
inline vf from_bits(vi v) { return (vf)v; }
inline vf vabs(vf x) { return from_bits(bits(x) & 0x7FFFFFFF); }
inline vf vsel(vi m, vf a, vf b) { return m ? a : b; }

#if K3_FAST_W == 16
inline vf vmax(vf a, vf b) { return (vf)_mm512_max_ps((__m512)a, (__m512)b); }
inline vf vmin(vf a, vf b) { return (vf)_mm512_min_ps((__m512)a, (__m512)b); }
inline vf vsqrt(vf a) { return (vf)_mm512_sqrt_ps((__m512)a); }
inline vf vgather(const float* base, vi idx) { return (vf)_mm512_i32gather_ps((__m512i)idx, base, 4); }
#else
inline vf vmax(vf a, vf b) { return (vf)_mm256_max_ps((__m256)a, (__m256)b); }
inline vf vmin(vf a, vf b) { return (vf)_mm256_min_ps((__m256)a, (__m256)b); }
inline vf vsqrt(vf a) { return (vf)_mm256_sqrt_ps((__m256)a); }
inline vf vgather(const float* base, vi idx) { return (vf)_mm256_i32gather_ps(base, (__m256i)idx, 4); }
#endif

// round(clamp(t, lo, hi)) as a float. For finite t it equals clamp(nearest_int(t), lo, hi) (the
// scalar form): nearest_int is monotonic, and adding then subtracting 1.5*2^23 rounds to nearest
// even exactly on [lo, hi]. Callers keep t finite.
inline vf vround_clamp(vf t, vf lo, vf hi) { return (vmin(vmax(t, lo), hi) + 12582912.f) - 12582912.f; }

inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007FFFFF) - 0x00400000;
}
inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }
constexpr float kGroupMaxEps = 1e-15f;

// Per sub-block result of a search. The codes are not kept: the scale and offset of the accepted
// trial (acc_is, acc_mn) reproduce them bit for bit when the super-block needs them (its
// re-quantization skips sub-blocks whose stored scale is 0).
struct Search {
  float* scale;   // scale
  float* min;     // min_out = -min (qkx only)
  float* acc_is;  // iscale of the accepted trial
  float* acc_mn;  // min in effect for the accepted trial (qkx only)
  uint8_t* zero;  // flat (qkx) or all-zero (qx) sub-block: codes 0
  float* sw;      // sum of the weights (given weights only)
};

// ---- scalar search (§6.1) for the rare lanes the vector search hands back ----
float qkx_scalar(int n, int nmax, const float* x, const float* w, float rmin, float rdelta, int nstep, bool use_mad,
                 float* min_out, float* acc_is, float* acc_mn) {
  auto err = [&](float t) { return use_mad ? std::fabs(t) : t * t; };
  float min = x[0], max = x[0], sum_w = 0, sum_x = 0;
  for (int i = 0; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  *acc_is = iscale;
  *acc_mn = min;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
    best += w[i] * err(scale * l + min - x[i]);
  }
  uint8_t La[32];
  for (int is = 0; is <= nstep; ++is) {
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
    for (int i = 0; i < n; ++i) cur += w[i] * err(this_scale * La[i] + this_min - x[i]);
    if (cur < best) {
      best = cur;
      scale = this_scale;
      *acc_is = iscale;
      *acc_mn = min;
      min = this_min;
    }
  }
  *min_out = -min;
  return scale;
}

// ---- lane-parallel searches over one batch; x, w: [N][H] vectors ----

// make_qkx2_quants (= make_qkx3_quants with weights passed). out: lane results for the B
// sub-blocks of the batch; redo: lanes whose range max - min is so small that nmax/(max - min)
// may overflow (the scalar code's integer wrap-around would then differ): done in scalar.
template <int N>
void qkx_search(const vf* x, const vf* w, int nmax, float rmin, float rdelta, int nstep, bool use_mad, float* o_scale,
                float* o_min, float* o_is, float* o_mn, int32_t* o_zero, int32_t* o_redo) {
  const float fmax = static_cast<float>(nmax);
  const vf lo = splat(0), hi = splat(fmax);
  vf mn[H], mx[H], sum_w[H], sum_x[H], scale[H], best[H], acc_is[H], acc_mn[H];
  vi flat[H];
  for (int h = 0; h < H; ++h) {
    mn[h] = mx[h] = x[h];
    sum_w[h] = sum_x[h] = splat(0);
  }
  for (int i = 0; i < N; ++i)
    for (int h = 0; h < H; ++h) {
      const vf xi = x[i * H + h], wi = w[i * H + h];
      mn[h] = vsel(xi < mn[h], xi, mn[h]);
      mx[h] = vsel(xi > mx[h], xi, mx[h]);
      sum_w[h] += wi;
      sum_x[h] += wi * xi;
    }
  for (int h = 0; h < H; ++h) {
    mn[h] = vsel(mn[h] > 0, splat(0), mn[h]);
    flat[h] = mx[h] == mn[h];
    const vi redo = ~flat[h] & (mx[h] - mn[h] < 1e-30f);
    std::memcpy(o_redo + h * W, &redo, sizeof(vi));
    acc_is[h] = fmax / (mx[h] - mn[h]);
    acc_mn[h] = mn[h];
    scale[h] = 1.0f / acc_is[h];
    best[h] = splat(0);
  }
  for (int i = 0; i < N; ++i)
    for (int h = 0; h < H; ++h) {
      const vf xi = x[i * H + h];
      const vf l = vround_clamp(acc_is[h] * (xi - mn[h]), lo, hi);
      const vf t = scale[h] * l + mn[h] - xi;
      best[h] += w[i * H + h] * (use_mad ? vabs(t) : t * t);
    }
  vf La[N * H];
  for (int is = 0; is <= nstep; ++is) {
    const float c = rmin + rdelta * static_cast<float>(is) + fmax;
    vf iscale[H], sl[H], sl2[H], sxl[H];
    for (int h = 0; h < H; ++h) {
      iscale[h] = c / (mx[h] - mn[h]);
      sl[h] = sl2[h] = sxl[h] = splat(0);
    }
    for (int i = 0; i < N; ++i)
      for (int h = 0; h < H; ++h) {
        const vf xi = x[i * H + h];
        const vf l = vround_clamp(iscale[h] * (xi - mn[h]), lo, hi);
        La[i * H + h] = l;
        const vf wl = w[i * H + h] * l;
        sl[h] += wl;
        sl2[h] += wl * l;
        sxl[h] += wl * xi;
      }
    vf ts[H], tm[H], cur[H];
    vi ok[H];
    for (int h = 0; h < H; ++h) {
      const vf D = sum_w[h] * sl2[h] - sl[h] * sl[h];
      ok[h] = D > 0;
      ts[h] = (sum_w[h] * sxl[h] - sum_x[h] * sl[h]) / D;
      tm[h] = (sl2[h] * sum_x[h] - sl[h] * sxl[h]) / D;
      const vi pos = tm[h] > 0;
      tm[h] = vsel(pos, splat(0), tm[h]);
      ts[h] = vsel(pos, sxl[h] / sl2[h], ts[h]);
      cur[h] = splat(0);
    }
    if (use_mad) {
      for (int i = 0; i < N; ++i)
        for (int h = 0; h < H; ++h) {
          const vf t = ts[h] * La[i * H + h] + tm[h] - x[i * H + h];
          cur[h] += w[i * H + h] * vabs(t);
        }
    } else {
      for (int i = 0; i < N; ++i)
        for (int h = 0; h < H; ++h) {
          const vf t = ts[h] * La[i * H + h] + tm[h] - x[i * H + h];
          cur[h] += w[i * H + h] * (t * t);
        }
    }
    for (int h = 0; h < H; ++h) {
      const vi take = ok[h] & (cur[h] < best[h]);
      best[h] = vsel(take, cur[h], best[h]);
      scale[h] = vsel(take, ts[h], scale[h]);
      acc_is[h] = vsel(take, iscale[h], acc_is[h]);
      acc_mn[h] = vsel(take, mn[h], acc_mn[h]);
      mn[h] = vsel(take, tm[h], mn[h]);
    }
  }
  for (int h = 0; h < H; ++h) {
    const vf s = vsel(flat[h], splat(0), scale[h]);
    const vf m = -mn[h];
    std::memcpy(o_scale + h * W, &s, sizeof(vf));
    std::memcpy(o_min + h * W, &m, sizeof(vf));
    std::memcpy(o_is + h * W, &acc_is[h], sizeof(vf));
    std::memcpy(o_mn + h * W, &acc_mn[h], sizeof(vf));
    std::memcpy(o_zero + h * W, &flat[h], sizeof(vi));
  }
}

// make_qx_quants with rmse_type 1: weights w (x*x, or the importance values).
template <int N>
void qx_search(const vf* x, const vf* w, int nmax, float* o_scale, float* o_is, int32_t* o_zero) {
  const vf lo = splat(static_cast<float>(-nmax)), hi = splat(static_cast<float>(nmax - 1));
  vf amax[H], mx[H];
  for (int h = 0; h < H; ++h) amax[h] = mx[h] = splat(0);
  for (int i = 0; i < N; ++i)
    for (int h = 0; h < H; ++h) {
      const vf xi = x[i * H + h];
      const vf ax = vabs(xi);
      const vi gt = ax > amax[h];
      amax[h] = vsel(gt, ax, amax[h]);
      mx[h] = vsel(gt, xi, mx[h]);
    }
  vf wx[N * H];
  for (int i = 0; i < N * H; ++i) wx[i] = w[i] * x[i];
  vf sumlx[H], suml2[H];
  auto trial = [&](const vf* iscale) {
    for (int h = 0; h < H; ++h) sumlx[h] = suml2[h] = splat(0);
    for (int i = 0; i < N; ++i)
      for (int h = 0; h < H; ++h) {
        const vf l = vround_clamp(iscale[h] * x[i * H + h], lo, hi);
        sumlx[h] += wx[i * H + h] * l;
        suml2[h] += w[i * H + h] * l * l;
      }
  };
  vf iscale[H], scale[H], best[H], acc_is[H];
  for (int h = 0; h < H; ++h) iscale[h] = static_cast<float>(-nmax) / mx[h];
  trial(iscale);
  for (int h = 0; h < H; ++h) {
    scale[h] = vsel(suml2[h] != 0, sumlx[h] / suml2[h], splat(0));
    best[h] = scale[h] * sumlx[h];
    acc_is[h] = iscale[h];
  }
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float c = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is));
    for (int h = 0; h < H; ++h) iscale[h] = c / mx[h];
    trial(iscale);
    for (int h = 0; h < H; ++h) {
      const vi take = (suml2[h] > 0) & (sumlx[h] * sumlx[h] > best[h] * suml2[h]);
      scale[h] = vsel(take, sumlx[h] / suml2[h], scale[h]);
      best[h] = vsel(take, scale[h] * sumlx[h], best[h]);
      acc_is[h] = vsel(take, iscale[h], acc_is[h]);
    }
  }
  for (int h = 0; h < H; ++h) {
    const vi zero = amax[h] < kGroupMaxEps;
    const vf s = vsel(zero, splat(0), scale[h]);
    std::memcpy(o_scale + h * W, &s, sizeof(vf));
    std::memcpy(o_is + h * W, &acc_is[h], sizeof(vf));
    std::memcpy(o_zero + h * W, &zero, sizeof(vi));
  }
}

// ---- rows: batches of B consecutive sub-blocks of N elements ----

enum class Weights { Abs, AvAbs, Given, Square };

struct SearchParams {
  bool qkx;  // qkx (asymmetric, Q2_K/Q4_K/Q5_K) or qx (symmetric, Q6_K)
  Weights wk;
  int nmax;
  float rmin, rdelta;
  int nstep;
  bool use_mad;
};

template <int N>
void search_row(const float* x, const float* wgiven, int64_t n_sub, const SearchParams& p, const Search& out) {
  alignas(64) vf xv[N * H], wv[N * H];
  alignas(64) float r_scale[B], r_min[B], r_is[B], r_mn[B];
  alignas(64) int32_t r_zero[B], r_redo[B];
  for (int64_t first = 0; first < n_sub; first += B) {
    const int count = static_cast<int>(std::min<int64_t>(B, n_sub - first));
    vi idx[H];
    for (int h = 0; h < H; ++h)
      for (int k = 0; k < W; ++k) idx[h][k] = static_cast<int32_t>(std::min<int64_t>(first + h * W + k, n_sub - 1) * N);
    for (int i = 0; i < N; ++i)
      for (int h = 0; h < H; ++h) xv[i * H + h] = vgather(x + i, idx[h]);
    switch (p.wk) {
      case Weights::Given: {
        vf s[H];
        for (int h = 0; h < H; ++h) s[h] = splat(0);
        for (int i = 0; i < N; ++i)
          for (int h = 0; h < H; ++h) {
            wv[i * H + h] = vgather(wgiven + i, idx[h]);
            s[h] += wv[i * H + h];
          }
        if (out.sw)
          for (int h = 0; h < H; ++h)
            for (int k = 0; k < W && h * W + k < count; ++k) out.sw[first + h * W + k] = s[h][k];
        break;
      }
      case Weights::Abs:
        for (int i = 0; i < N * H; ++i) wv[i] = vabs(xv[i]);
        break;
      case Weights::Square:
        for (int i = 0; i < N * H; ++i) wv[i] = xv[i] * xv[i];
        break;
      case Weights::AvAbs: {
        vf s2[H], av[H];
        for (int h = 0; h < H; ++h) s2[h] = splat(0);
        for (int i = 0; i < N; ++i)
          for (int h = 0; h < H; ++h) s2[h] += xv[i * H + h] * xv[i * H + h];
        for (int h = 0; h < H; ++h) av[h] = vsqrt(s2[h] / static_cast<float>(N));
        for (int i = 0; i < N; ++i)
          for (int h = 0; h < H; ++h) wv[i * H + h] = av[h] + vabs(xv[i * H + h]);
        break;
      }
    }
    if (p.qkx) qkx_search<N>(xv, wv, p.nmax, p.rmin, p.rdelta, p.nstep, p.use_mad, r_scale, r_min, r_is, r_mn, r_zero, r_redo);
    else qx_search<N>(xv, wv, p.nmax, r_scale, r_is, r_zero);
    for (int k = 0; k < count; ++k) {
      const int64_t s = first + k;
      const int h = k / W, lane = k % W;
      if (p.qkx && r_redo[k]) {
        float xs[N], ws[N];
        for (int i = 0; i < N; ++i) {
          xs[i] = xv[i * H + h][lane];
          ws[i] = wv[i * H + h][lane];
        }
        out.scale[s] = qkx_scalar(N, p.nmax, xs, ws, p.rmin, p.rdelta, p.nstep, p.use_mad, &out.min[s], &out.acc_is[s],
                                  &out.acc_mn[s]);
        out.zero[s] = 0;
        continue;
      }
      out.scale[s] = r_scale[k];
      if (p.qkx) {
        out.min[s] = r_min[k];
        out.acc_mn[s] = r_mn[k];
      }
      out.acc_is[s] = r_is[k];
      out.zero[s] = r_zero[k] ? 1 : 0;
    }
  }
}

// The search's codes of sub-block s (needed only where the stored scale rounds to 0).
void qkx_codes(const float* xs, int n, int nmax, const Search& r, int64_t s, uint8_t* L) {
  if (r.zero[s]) {
    std::memset(L, 0, n);
    return;
  }
  for (int i = 0; i < n; ++i)
    L[i] = static_cast<uint8_t>(clampi(nearest_int(r.acc_is[s] * (xs[i] - r.acc_mn[s])), 0, nmax));
}
void qx_codes(const float* xs, int n, int nmax, const Search& r, int64_t s, uint8_t* L) {
  if (r.zero[s]) {
    std::memset(L, 0, n);
    return;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(clampi(nearest_int(r.acc_is[s] * xs[i]), -nmax, nmax - 1) + nmax);
}

// make_qp_quants (§6.1): n <= 16 non-negative values per super-block, the scalar reference's.
using ref::detail::make_qp_quants;

// Importance weights of a row, w_l = qw_l*sqrt(sigma2 + x_l^2), sigma2 = factor*(sum x^2)/256
// per super-block (Q2_K factor 1, Q3_K..Q5_K factor 2).
void imatrix_weights(const float* x, const float* qw, int64_t n, float factor, float* w) {
  for (int64_t b = 0; b < n; b += 256) {
    float s = 0;
    for (int l = 0; l < 256; ++l) s += x[b + l] * x[b + l];
    const float sigma2 = factor * s / 256;
    for (int l = 0; l < 256; l += W) {
      vf xv, qv;
      std::memcpy(&xv, x + b + l, sizeof(vf));
      std::memcpy(&qv, qw + b + l, sizeof(vf));
      const vf r = qv * vsqrt(sigma2 + xv * xv);
      std::memcpy(w + b + l, &r, sizeof(vf));
    }
  }
}

// L = clamp(nearest_int((x + dm)/dq), 0, nmax) over n elements (a multiple of W).
inline void requant_affine(const float* x, float dq, float dm, float nmax, uint8_t* L, int n) {
  for (int i = 0; i < n; i += W) {
    vf xv;
    std::memcpy(&xv, x + i, sizeof(vf));
    const vi l = __builtin_convertvector(vround_clamp((xv + dm) / dq, splat(0), splat(nmax)), vi);
    for (int k = 0; k < W; ++k) L[i + k] = static_cast<uint8_t>(l[k]);
  }
}
// L = clamp(nearest_int(x/dq), lo, hi) + off over n elements (a multiple of W).
inline void requant_sym(const float* x, float dq, float lo, float hi, int off, uint8_t* L, int n) {
  for (int i = 0; i < n; i += W) {
    vf xv;
    std::memcpy(&xv, x + i, sizeof(vf));
    const vi l = __builtin_convertvector(vround_clamp(xv / dq, splat(lo), splat(hi)), vi) + off;
    for (int k = 0; k < W; ++k) L[i + k] = static_cast<uint8_t>(l[k]);
  }
}

// Per-row scratch.
struct RowBuf {
  std::vector<float> w, scale, min, acc_is, acc_mn, sw;
  std::vector<uint8_t> zero;
  Search view(int64_t n) {
    const size_t ns = static_cast<size_t>(n / 16);
    w.resize(static_cast<size_t>(n));
    for (auto* v : {&scale, &min, &acc_is, &acc_mn, &sw}) v->resize(ns);
    zero.resize(ns);
    return Search{scale.data(), min.data(), acc_is.data(), acc_mn.data(), zero.data(), sw.data()};
  }
};

// ---- Q2_K (§6.2, §6.7) ----
void row_q2_K(const float* x, block_q2_K* y, int64_t n, const float* qw, RowBuf& buf) {
  const int64_t nb = n / 256;
  const Search r = buf.view(n);
  if (qw) {
    imatrix_weights(x, qw, n, 1.f, buf.w.data());
    search_row<16>(x, buf.w.data(), n / 16, {true, Weights::Given, 3, -0.9f, 0.05f, 36, false}, r);
  } else {
    search_row<16>(x, nullptr, n / 16, {true, Weights::Abs, 3, -0.5f, 0.1f, 15, true}, r);
  }
  for (int64_t i = 0; i < nb; ++i) {
    block_q2_K& b = y[i];
    const float* xb = x + 256 * i;
    const float* s = r.scale + 16 * i;
    const float* m = r.min + 16 * i;
    if (!qw) {
      float max_scale = 0, max_min = 0;
      for (int j = 0; j < 16; ++j) {
        max_scale = max_scale < s[j] ? s[j] : max_scale;
        max_min = max_min < m[j] ? m[j] : max_min;
      }
      if (max_scale > 0) {
        const float iscale = 15 / max_scale;
        for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>(nearest_int(iscale * s[j]));
        b.d = fp32_to_fp16(max_scale / 15);
      } else {
        std::memset(b.scales, 0, 16);
        b.d = fp32_to_fp16(0.f);
      }
      if (max_min > 0) {
        const float iscale = 15 / max_min;
        for (int j = 0; j < 16; ++j) b.scales[j] |= static_cast<uint8_t>(nearest_int(iscale * m[j]) << 4);
        b.dmin = fp32_to_fp16(max_min / 15);
      } else {
        b.dmin = fp32_to_fp16(0.f);
      }
    } else {
      uint8_t Ls[16], Lm[16];
      b.d = fp32_to_fp16(make_qp_quants(16, 15, s, Ls, r.sw + 16 * i));
      b.dmin = fp32_to_fp16(make_qp_quants(16, 15, m, Lm, r.sw + 16 * i));
      for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<uint8_t>(Ls[j] | Lm[j] << 4);
    }
    const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
    alignas(64) uint8_t L[256];
    for (int j = 0; j < 16; ++j) {
      const float dq = d * (b.scales[j] & 15);
      if (dq == 0) {
        qkx_codes(xb + 16 * j, 16, 3, r, 16 * i + j, L + 16 * j);
        continue;
      }
      const float dm = dmin * (b.scales[j] >> 4);
      requant_affine(xb + 16 * j, dq, dm, 3.f, L + 16 * j, 16);
    }
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const uint8_t* q = L + 128 * h + l;
        b.qs[32 * h + l] = static_cast<uint8_t>(q[0] | q[32] << 2 | q[64] << 4 | q[96] << 6);
      }
  }
}

// ---- Q4_K / Q5_K (§6.4, §6.5, §6.7); d, dmin and scales sit at the same offsets in both ----
template <bool Q5>
void row_q45_K(const float* x, uint8_t* dst, int64_t n, const float* qw, RowBuf& buf) {
  constexpr int nmax = Q5 ? 31 : 15;
  constexpr size_t bsize = Q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
  const int64_t nb = n / 256;
  const Search r = buf.view(n);
  if (qw) {
    imatrix_weights(x, qw, n, 2.f, buf.w.data());
    search_row<32>(x, buf.w.data(), n / 32, {true, Weights::Given, nmax, -0.9f, 0.05f, 36, false}, r);
  } else {
    search_row<32>(x, nullptr, n / 32, {true, Weights::AvAbs, nmax, Q5 ? -0.5f : -1.f, 0.1f, Q5 ? 15 : 20, false}, r);
  }
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* bp = dst + i * bsize;
    const float* s = r.scale + 8 * i;
    const float* m = r.min + 8 * i;
    const float* xb = x + 256 * i;
    uint16_t d16, dmin16;
    uint8_t scales[12], ls[8], lm[8];
    if (!qw) {
      float max_scale = 0, max_min = 0;
      for (int j = 0; j < 8; ++j) {
        max_scale = max_scale < s[j] ? s[j] : max_scale;
        max_min = max_min < m[j] ? m[j] : max_min;
      }
      const float inv_s = max_scale > 0 ? 63 / max_scale : 0.f;
      const float inv_m = max_min > 0 ? 63 / max_min : 0.f;
      for (int j = 0; j < 8; ++j) {
        // the byte conversion (wrapping a negative value) comes before the min (§2)
        const uint8_t a = static_cast<uint8_t>(nearest_int(inv_s * s[j]));
        const uint8_t c = static_cast<uint8_t>(nearest_int(inv_m * m[j]));
        ls[j] = a < 63 ? a : 63;
        lm[j] = c < 63 ? c : 63;
      }
      d16 = fp32_to_fp16(max_scale / 63);
      dmin16 = fp32_to_fp16(max_min / 63);
    } else {
      d16 = fp32_to_fp16(make_qp_quants(8, 63, s, ls, r.sw + 8 * i));
      dmin16 = fp32_to_fp16(make_qp_quants(8, 63, m, lm, r.sw + 8 * i));
    }
    for (int j = 0; j < 4; ++j) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    }
    for (int j = 4; j < 8; ++j) {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 15) | (lm[j] & 15) << 4);
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
    const float d = fp16_to_fp32(d16), dmin = fp16_to_fp32(dmin16);
    alignas(64) uint8_t L[256];
    for (int j = 0; j < 8; ++j) {
      int sj, mj;
      if (j < 4) {
        sj = scales[j] & 63;
        mj = scales[j + 4] & 63;
      } else {
        sj = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4;
        mj = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4;
      }
      const float dq = d * sj;
      if (dq == 0) {
        qkx_codes(xb + 32 * j, 32, nmax, r, 8 * i + j, L + 32 * j);
        continue;
      }
      const float dm = dmin * mj;
      requant_affine(xb + 32 * j, dq, dm, static_cast<float>(nmax), L + 32 * j, 32);
    }
    std::memcpy(bp, &d16, 2);
    std::memcpy(bp + 2, &dmin16, 2);
    std::memcpy(bp + 4, scales, 12);
    if constexpr (Q5) {
      auto& b = *reinterpret_cast<block_q5_K*>(bp);
      std::memset(b.qh, 0, sizeof b.qh);
      for (int p = 0; p < 4; ++p)
        for (int l = 0; l < 32; ++l) {
          const int a = L[64 * p + l], c = L[64 * p + 32 + l];
          b.qh[l] |= static_cast<uint8_t>((a >> 4) << (2 * p) | (c >> 4) << (2 * p + 1));
          b.qs[32 * p + l] = static_cast<uint8_t>((a & 15) | (c & 15) << 4);
        }
    } else {
      auto& b = *reinterpret_cast<block_q4_K*>(bp);
      for (int p = 0; p < 4; ++p)
        for (int l = 0; l < 32; ++l) b.qs[32 * p + l] = static_cast<uint8_t>(L[64 * p + l] | L[64 * p + 32 + l] << 4);
    }
  }
}

// ---- Q6_K (§6.6, §6.7) ----
void row_q6_K(const float* x, block_q6_K* y, int64_t n, const float* qw, RowBuf& buf) {
  const int64_t nb = n / 256;
  const Search r = buf.view(n);
  search_row<16>(x, qw, n / 16, {false, qw ? Weights::Given : Weights::Square, 32, 0, 0, 0, false}, r);
  for (int64_t i = 0; i < nb; ++i) {
    block_q6_K& b = y[i];
    const float* s = r.scale + 16 * i;
    const float* xb = x + 256 * i;
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      const float a = std::fabs(s[j]);
      if (a > amax) {
        amax = a;
        max_scale = s[j];
      }
    }
    if (amax < kGroupMaxEps) {
      std::memset(&b, 0, sizeof b);
      continue;
    }
    const float iscale = -128 / max_scale;
    b.d = fp32_to_fp16(1 / iscale);
    for (int j = 0; j < 16; ++j) {
      const int v = nearest_int(iscale * s[j]);
      b.scales[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    const float d = fp16_to_fp32(b.d);
    alignas(64) uint8_t L[256];
    for (int j = 0; j < 16; ++j) {
      const float dq = d * b.scales[j];
      if (dq == 0) {
        qx_codes(xb + 16 * j, 16, 32, r, 16 * i + j, L + 16 * j);
        continue;
      }
      requant_sym(xb + 16 * j, dq, -32.f, 31.f, 32, L + 16 * j, 16);
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = L + 128 * h;
      uint8_t* ql = b.ql + 64 * h;
      uint8_t* qh = b.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((q[l] & 15) | (q[l + 64] & 15) << 4);
        ql[l + 32] = static_cast<uint8_t>((q[l + 32] & 15) | (q[l + 96] & 15) << 4);
        qh[l] = static_cast<uint8_t>((q[l] >> 4) | (q[l + 32] >> 4) << 2 | (q[l + 64] >> 4) << 4 | (q[l + 96] >> 4) << 6);
      }
    }
  }
}

}  // namespace

// Quantizes nrows rows of n floats (n a multiple of 256) to Q2_K (10), Q4_K (12), Q5_K (13) or
// Q6_K (14); qw: n importance weights or null. Returns false for any other type.
bool quantize_rows(uint32_t type, const float* src, void* dst, int64_t nrows, int64_t n, const float* qw) {
  if ((type != 10 && type != 12 && type != 13 && type != 14) || n % 256 != 0) return false;
  // n/16 sub-blocks of 16 (or 32) must be addressable by 32-bit gather offsets
  if (n > (int64_t{1} << 30)) return false;
  thread_local RowBuf buf;  // grows to the longest row seen, reused across calls
  size_t bsize = 0;
  switch (type) {
    case 10: bsize = sizeof(block_q2_K); break;
    case 12: bsize = sizeof(block_q4_K); break;
    case 13: bsize = sizeof(block_q5_K); break;
    default: bsize = sizeof(block_q6_K); break;
  }
  const size_t row_bytes = bsize * static_cast<size_t>(n / 256);
  for (int64_t r = 0; r < nrows; ++r) {
    const float* x = src + r * n;
    uint8_t* y = static_cast<uint8_t*>(dst) + r * row_bytes;
    switch (type) {
      case 10: row_q2_K(x, reinterpret_cast<block_q2_K*>(y), n, qw, buf); break;
      case 12: row_q45_K<false>(x, y, n, qw, buf); break;
      case 13: row_q45_K<true>(x, y, n, qw, buf); break;
      default: row_q6_K(x, reinterpret_cast<block_q6_K*>(y), n, qw, buf); break;
    }
  }
  return true;
}

}  // namespace k3::quant::K3_FAST_NS
