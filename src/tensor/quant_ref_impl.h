// Helpers shared by the reference quantizers (quant_ref_*.cpp); quant-formats.md §2 and §6.1.
// Include first in those files: byte parity with ggml needs every float operation rounded on
// its own, in source order, so a*b + c must never be fused into an FMA (even under -mfma).
#pragma once
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

namespace k3::ref::detail {

constexpr float GROUP_MAX_EPS = 1e-15f;

// Round to nearest, ties to even: adding 1.5*2^23 leaves round(f) in the low mantissa bits.
// Valid for |f| <= 4194303 (and, like ggml, silently wrong beyond).
inline int nearest_int(float f) {
  const float v = f + 12582912.f;
  int32_t i;
  std::memcpy(&i, &v, 4);
  return (i & 0x007FFFFF) - 0x00400000;
}

// The element with the largest |x|: strict > from 0, so the first wins ties and keeps its sign;
// an all-zero group gives max = +0.
struct AbsMax {
  float amax = 0;
  float max = 0;
};
inline AbsMax abs_max(const float* x, int n) {
  AbsMax m;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > m.amax) {
      m.amax = ax;
      m.max = x[i];
    }
  }
  return m;
}

inline int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Search routines of §6.1. make_qkx2_quants also serves as ggml's make_qkx3_quants: with
// weights passed (all callers do) the two differ only in an equivalent `max == min` test.
// Returns the scale; *min_out = -min >= 0 is subtracted on decode; L in [0, nmax].
float make_qkx2_quants(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, float rmin,
                       float rdelta, int nstep, bool use_mad);
// do_rmse = true variant (the only one used): L in [0, 2*nmax), stored + nmax.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L);
// rmse_type = 1 (the only one used): weights qw, or x*x when null; L stored + nmax.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L, const float* qw);
// Non-negative values (sub-block scales or mins) to L in [0, nmax] under weights qw.
float make_qp_quants(int n, int nmax, const float* x, uint8_t* L, const float* qw);

}  // namespace k3::ref::detail
