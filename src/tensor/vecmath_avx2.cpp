// AVX2 + FMA forms of vecmath.h (8 lanes). Only file-local code (kernels_impl.h explains why).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tensor/ggml_order.h"
#include "tensor/scratch.h"
#include "tensor/vecmath.h"

namespace k3 {
namespace {

constexpr int64_t kW = 8;
using vf = __m256;
inline vf set1(float a) { return _mm256_set1_ps(a); }
inline vf ld(const float* p) { return _mm256_loadu_ps(p); }
inline void st(float* p, vf v) { _mm256_storeu_ps(p, v); }
inline vf add(vf a, vf b) { return _mm256_add_ps(a, b); }
inline vf sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
inline vf mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
inline vf div(vf a, vf b) { return _mm256_div_ps(a, b); }
inline vf fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
inline vf vabs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
inline vf copysign(vf m, vf s) {
  const vf sign = _mm256_set1_ps(-0.0f);
  return _mm256_or_ps(_mm256_andnot_ps(sign, m), _mm256_and_ps(sign, s));
}
inline vf sel_lt(vf a, vf b, vf x, vf y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
inline bool all_lt(vf a, vf b) { return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ)) == 0xff; }
inline vf vtrunc(vf a) { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
inline vf vpow2(vf k) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23));
}
// ggml_vec_soft_max_f32's AVX2 sum of a block: lane l + lane l+4, then (0 + 2) + (1 + 3).
inline float block_sum(vf v) {
  __m128 s = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
// ggml's AVX reduce (vec_dot_f32): lane l + lane l+4, then two horizontal adds.
inline float lane_sum(vf v) {
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 u = _mm_hadd_ps(t, t);
  return _mm_cvtss_f32(_mm_hadd_ps(u, u));
}
// The double half of exp (vecmath_simd.inc): 4 lanes, the table by a gather.
using vd = __m256d;
inline vd dset1(double a) { return _mm256_set1_pd(a); }
inline vd dsub(vd a, vd b) { return _mm256_sub_pd(a, b); }
inline vd dmul(vd a, vd b) { return _mm256_mul_pd(a, b); }
inline vd dfma(vd a, vd b, vd c) { return _mm256_fmadd_pd(a, b, c); }
inline vd dfms(vd a, vd b, vd c) { return _mm256_fmsub_pd(a, b, c); }
inline vd dscale(vd k, const uint64_t* table) {
  const __m256i ki = _mm256_castpd_si256(k), i = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  const __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(table), i, 8);
  return _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(ki, 47)));
}
inline void split(vf x, vd& lo, vd& hi) {
  lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
}
inline vf join(vd lo, vd hi) { return _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo)); }

#include "tensor/vecmath_simd.inc"

// ggml's AVX2 form: k = 2^n from the shifter's bits, the result k·j + k; where |n| > 126, 2^n as
// s1·s2 (both normal), and s1² (0 or inf) past |n| > 192.
inline vf exp_ggml(vf t) {
  const ExpParts e = exp_parts(t);
  const __m256i bits = _mm256_slli_epi32(_mm256_castps_si256(e.z), 23);
  const vf k = _mm256_castsi256_ps(_mm256_add_epi32(bits, _mm256_castps_si256(set1(1.0f))));
  const vf j = fma(e.u, e.q, mul(set1(0x1.ffffecp-1f), e.b)), r = fma(j, k, k);
  const vf big = _mm256_cmp_ps(vabs(e.n), set1(126.0f), _CMP_GT_OQ);
  if (!_mm256_movemask_ps(big)) return r;
  const __m256i d = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(e.n, set1(0.0f), _CMP_LE_OQ)),
                                     _mm256_set1_epi32(static_cast<int>(0x82000000u)));
  const vf s1 = _mm256_castsi256_ps(_mm256_add_epi32(d, _mm256_set1_epi32(0x7f000000)));
  const vf s2 = _mm256_castsi256_ps(_mm256_sub_epi32(bits, d));
  const vf huge = _mm256_cmp_ps(vabs(e.n), set1(192.0f), _CMP_GT_OQ);
  return _mm256_blendv_ps(_mm256_blendv_ps(r, mul(fma(s2, j, s2), s1), big), mul(s1, s1), huge);
}

}  // namespace

namespace detail {
void vecmath_avx2(VecMath& v) { fill_vecmath(v); }
}  // namespace detail
}  // namespace k3
