// AVX-512 forms of vecmath.h (16 lanes). Only file-local code (kernels_impl.h explains why).
#include "tensor/avx512.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/ggml_order.h"
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
inline vf vabs(vf a) { return _mm512_abs_ps(a); }
inline vf copysign(vf m, vf s) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(sign, _mm512_castps_si512(s), _mm512_castps_si512(m), 0xCA));  // sign ? s : m
}
inline vf sel_lt(vf a, vf b, vf x, vf y) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x); }
inline bool all_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ) == 0xffff; }
inline vf vtrunc(vf a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
inline vf vpow2(vf k) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23));
}
// ggml's AVX-512 reduce (_mm512_reduce_add_ps): l + l+8, l + l+4, then (0 + 2) + (1 + 3).
inline float lane_sum(vf v) { return _mm512_reduce_add_ps(v); }
inline float block_sum(vf v) { return _mm512_reduce_add_ps(v); }  // ggml_vec_soft_max_f32's too
// The double half of exp (vecmath_simd.inc): 8 lanes, the table's 32 entries from 4 registers (two
// two-register permutes and a blend on bit 4 of the index).
using vd = __m512d;
inline vd dset1(double a) { return _mm512_set1_pd(a); }
inline vd dsub(vd a, vd b) { return _mm512_sub_pd(a, b); }
inline vd dmul(vd a, vd b) { return _mm512_mul_pd(a, b); }
inline vd dfma(vd a, vd b, vd c) { return _mm512_fmadd_pd(a, b, c); }
inline vd dfms(vd a, vd b, vd c) { return _mm512_fmsub_pd(a, b, c); }
inline vd dscale(vd k, const uint64_t* table) {
  const __m512i ki = _mm512_castpd_si512(k);
  const auto* t = reinterpret_cast<const double*>(table);
  const vd lo = _mm512_permutex2var_pd(_mm512_load_pd(t), ki, _mm512_load_pd(t + 8));
  const vd hi = _mm512_permutex2var_pd(_mm512_load_pd(t + 16), ki, _mm512_load_pd(t + 24));
  const __m512i e = _mm512_castpd_si512(_mm512_mask_blend_pd(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi));
  return _mm512_castsi512_pd(_mm512_add_epi64(e, _mm512_slli_epi64(ki, 47)));
}
inline void split(vf x, vd& lo, vd& hi) {
  lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
}
inline vf join(vd lo, vd hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1); }

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
