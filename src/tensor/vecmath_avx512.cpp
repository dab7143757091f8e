// AVX-512 forms of vecmath.h (16 lanes). Only file-local code (kernels_impl.h explains why).
#include "tensor/avx512.h"

#include <cmath>
#include <vector>

#include "tensor/scratch.h"
#include "tensor/vecmath.h"

namespace k3 {
namespace {

constexpr int64_t kW = 16;
using vf = __m512;
inline vf set1(float a) { return _mm512_set1_ps(a); }
inline vf ld(const float* p) { return _mm512_loadu_ps(p); }
inline void st(float* p, vf v) { _mm512_storeu_ps(p, v); }
inline vf add(vf a, vf b) { return _mm512_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm512_div_ps(a, b); }
inline vf fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
inline vf vmin(vf a, vf b) { return _mm512_min_ps(a, b); }
inline vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
inline vf vabs(vf a) { return _mm512_abs_ps(a); }
inline vf copysign(vf m, vf s) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(sign, _mm512_castps_si512(s), _mm512_castps_si512(m), 0xCA));  // sign ? s : m
}
inline vf rnd(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline vf scale2(vf p, vf n) { return _mm512_scalef_ps(p, n); }
inline vf sel_lt(vf a, vf b, vf x, vf y) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x); }
// 16 lanes in a[0] as 8: lane l + lane l+8.
inline __m256 fold16(const vf* a) {
  return _mm256_add_ps(_mm512_castps512_ps256(a[0]), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[0]), 1)));
}

#include "tensor/vecmath_simd.inc"

// ggml's AVX-512 form: 1 inside the last multiply-add, scalef by n; |n| > 192 gives 0 or inf.
inline vf exp_ggml(vf t) {
  const ExpParts e = exp_parts(t);
  const vf r = _mm512_scalef_ps(fma(e.q, e.u, fma(set1(0x1.ffffecp-1f), e.b, set1(1.0f))), e.n);
  const __mmask16 huge = _mm512_cmp_ps_mask(vabs(e.n), set1(192.0f), _CMP_GT_OQ);
  const __mmask16 low = _mm512_cmp_ps_mask(e.n, set1(0.0f), _CMP_LE_OQ);
  return _mm512_mask_blend_ps(huge, r, _mm512_mask_blend_ps(low, set1(INFINITY), set1(0.0f)));
}

}  // namespace

namespace detail {
void vecmath_avx512(VecMath& v) { fill_vecmath(v); }
}  // namespace detail
}  // namespace k3
