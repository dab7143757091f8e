// AVX-512 (F/BW/DQ/VL/VNNI/BF16) kernels. Every type first gets the 256-bit kernels compiled
// with the AVX-512 VL forms (VNNI dpbusd/dpwssd); Q4_K, the float dots (BF16 with dpbf16ps) and
// the Q8_0/Q8_K/F16 activation quantizers then get full 512-bit versions. The 32-element block
// types keep the 256-bit forms (the scalar reference's summation, gemm_avx512.cpp says why).
// Only file-local code here (kernels_impl.h explains why).
#include "tensor/avx512.h"

#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "tensor/blocks.h"
#include "tensor/ggml_order.h"
#include "tensor/iq3_grids.h"
#include "tensor/iq_grids.h"
#include "tensor/kernels_impl.h"

namespace k3 {
namespace {

#define K3_AVX512 1
#include "tensor/simd256_dot.inc"
#include "tensor/simd256_convert.inc"
#undef K3_AVX512

// ---- float types ------------------------------------------------------------------------------

inline __m512 load16_f32(const void* p, int64_t i) { return _mm512_loadu_ps(static_cast<const float*>(p) + i); }
inline __m512 load16_f16(const void* p, int64_t i) { return _mm512_cvtph_ps(load256(static_cast<const uint16_t*>(p) + i)); }

// F32 and F16 in the order of ggml's AVX-512 builds (ggml_dot_tail).
template <__m512 (*load16)(const void*, int64_t), float (*at)(const void*, int64_t), int kElt>
void vec_dot_float512(int64_t n, float* s, const void* x, const void* y) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    prefetch_span<64 * kElt>(static_cast<const uint8_t*>(x) + i * kElt);
    acc0 = _mm512_fmadd_ps(load16(x, i), load16(y, i), acc0);
    acc1 = _mm512_fmadd_ps(load16(x, i + 16), load16(y, i + 16), acc1);
    acc2 = _mm512_fmadd_ps(load16(x, i + 32), load16(y, i + 32), acc2);
    acc3 = _mm512_fmadd_ps(load16(x, i + 48), load16(y, i + 48), acc3);
  }
  const float head = hsum512(_mm512_add_ps(_mm512_add_ps(acc0, acc2), _mm512_add_ps(acc1, acc3)));
  *s = ggml_dot_tail<16, kElt == 2>(head, i, n, [&](int64_t k) { return at(x, k); }, [&](int64_t k) { return at(y, k); });
}

void dot_f16_f32_amx_512(int64_t n, float* s, const void* x, const float* y) {
  __m512 acc = _mm512_setzero_ps();
  for (int64_t i = 0; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(load16_f16(x, i), _mm512_loadu_ps(y + i), acc);
  *s = hsum512(acc);
}

// dpbf16ps multiplies bf16 pairs exactly and accumulates in f32; like ggml on this CPU class it
// treats subnormal bf16 inputs as zero.
void vec_dot_bf16_512(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const uint16_t*>(vx);
  const auto* y = static_cast<const uint16_t*>(vy);
  __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    prefetch_span<128>(x + i);
    acc0 = _mm512_dpbf16_ps(acc0, (__m512bh)load512(x + i), (__m512bh)load512(y + i));
    acc1 = _mm512_dpbf16_ps(acc1, (__m512bh)load512(x + i + 32), (__m512bh)load512(y + i + 32));
  }
  *s = bf16_dot_tail(acc0, acc1, i, n, [&](int64_t k) { return bf16_at(x, k); }, [&](int64_t k) { return bf16_at(y, k); });
}

// ---- Q4_K -------------------------------------------------------------------------------------

// 128 elements per step: one 64-byte load holds the codes of sub-blocks 4h..4h+3; its low
// nibbles (sub-blocks 4h, 4h+2) and high nibbles (4h+1, 4h+3) meet the matching activation halves.
void vec_dot_q4_K_512(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_q4_K*>(vx);
  const auto* y = static_cast<const block_q8_K*>(vy);
  const __m512i m4 = _mm512_set1_epi8(15);
  // int16 scale selectors: 128-bit lanes 0-1 take scale word j, lanes 2-3 word j+2 (j = 0 or 1)
  const __m512i sel_lo = _mm512_set_epi32(0x05040504, 0x05040504, 0x05040504, 0x05040504, 0x05040504, 0x05040504, 0x05040504, 0x05040504,
                                          0x01000100, 0x01000100, 0x01000100, 0x01000100, 0x01000100, 0x01000100, 0x01000100, 0x01000100);
  const __m512i sel_hi = _mm512_add_epi8(sel_lo, _mm512_set1_epi8(2));
  const __m512i step = _mm512_set1_epi8(8);  // four scale words further for h = 1
  KqSum ks;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    prefetch_span<sizeof(block_q4_K)>(x + i);
    const __m128i sm = q4k_scales(x[i].scales);
    const __m512i sc16 = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
    __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
    __m512i slo = sel_lo, shi = sel_hi;
    for (int h = 0; h < 2; ++h) {
      const __m512i q = load512(x[i].qs + 64 * h);
      const int8_t* a = y[i].qs + 128 * h;
      const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
      acc0 = _mm512_dpwssd_epi32(acc0, _mm512_maddubs_epi16(lo, pair256(a, a + 64)), _mm512_shuffle_epi8(sc16, slo));
      acc1 = _mm512_dpwssd_epi32(acc1, _mm512_maddubs_epi16(hi, pair256(a + 32, a + 96)), _mm512_shuffle_epi8(sc16, shi));
      slo = _mm512_add_epi8(slo, step);
      shi = _mm512_add_epi8(shi, step);
    }
    const __m512i acc = _mm512_add_epi32(acc0, acc1);
    const __m256i acc8 = _mm256_add_epi32(_mm512_castsi512_si256(acc), _mm512_extracti64x4_epi64(acc, 1));
    ks.add(acc8, q4k_mins(sm, y[i].bsums), y[i].d, h2f(x[i].d), h2f(x[i].dmin));
  }
  *s = ks.finish();
}

// ---- activation quantizers --------------------------------------------------------------------

// 16 floats times scale, rounded half to even and saturated to int8.
inline __m512i round16(const float* x, __m512 scale) {
  return _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), scale));
}

void from_float_q8_0_512(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_0*>(vy);
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x)), _mm512_abs_ps(_mm512_loadu_ps(x + 16))));
    const float d = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs), _mm512_cvtsepi32_epi8(round16(x, id)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16), _mm512_cvtsepi32_epi8(round16(x + 16, id)));
    y[i].d = f2h(d);
  }
}

void from_float_q8_K_512(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    __m512 m = _mm512_setzero_ps();
    for (int g = 0; g < 16; ++g) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * g)));
    const float amax = _mm512_reduce_max_ps(m);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(block_q8_K));
      continue;
    }
    const float iscale = -127.0f / first_with_abs(x, amax);
    const __m512 sv = _mm512_set1_ps(iscale);
    for (int g = 0; g < 16; ++g) {
      const __m512i q = _mm512_min_epi32(round16(x + 16 * g, sv), _mm512_set1_epi32(127));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * g), _mm512_cvtsepi32_epi8(q));
      y[i].bsums[g] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
    y[i].d = 1.0f / iscale;
  }
}

void from_float_f16_512(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = f2h(x[i]);
}

}  // namespace

namespace detail {

void register_avx512_kernels(KernelTable& t) {
  fill_simd256(t);
  using T = GgmlType;
  auto dot = [&](T type) -> auto& { return t[static_cast<int>(type)].vec_dot; };
  dot(T::F32) = vec_dot_float512<load16_f32, f32_at, 4>;
  dot(T::F16) = vec_dot_float512<load16_f16, f16_at, 2>;
  dot(T::BF16) = vec_dot_bf16_512;
  dot(T::Q4_K) = vec_dot_q4_K_512;
  t[static_cast<int>(T::Q8_0)].from_float = from_float_q8_0_512;
  t[static_cast<int>(T::Q8_K)].from_float = from_float_q8_K_512;
  t[static_cast<int>(T::F16)].from_float = from_float_f16_512;
  t[static_cast<int>(T::F16)].dot_f16_f32_amx = dot_f16_f32_amx_512;
}

}  // namespace detail
}  // namespace k3
