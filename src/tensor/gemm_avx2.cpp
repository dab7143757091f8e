// AVX2 matrix-matrix tiles, bit-identical per output to the 256-bit vec_dot kernels of
// simd256_dot.inc as compiled for AVX2 (gemm.h): the same integer lanes and the same float
// accumulation per output, with each weight block unpacked once per tile instead of once per
// (row, token) pair.
// Only file-local code here (kernels_impl.h explains why).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "tensor/blocks.h"
#include "tensor/gemm.h"

namespace k3 {
namespace {

#include "tensor/simd256_common.inc"
#include "tensor/gemm_tiles.inc"

// ---- 32-element blocks against Q8_0 activations ------------------------------------------------
//
// vec_dot (sum_blocks) adds block i's 8 int32 lanes dot_s8s8(w, a), converted and times d_w·d_a,
// into acc0 for even i and acc1 for odd i, then takes hsum(acc0 + acc1). The tile keeps both
// accumulators of every output; |w| is formed once per weight block, the sign transfer per output.

struct Q80W {
  using Block = block_q8_0;
  static __m256i codes(const Block& x) { return load256(x.qs); }
  static float scale(const Block& x) { return h2f(x.d); }
};
struct Q40W {
  using Block = block_q4_0;
  static __m256i codes(const Block& x) { return _mm256_sub_epi8(nibbles32(x.qs), _mm256_set1_epi8(8)); }
  static float scale(const Block& x) { return h2f(x.d); }
};
struct Q50W {
  using Block = block_q5_0;
  static __m256i codes(const Block& x) {
    const __m256i hb = bits_to_bytes(load_u32(x.qh));
    return _mm256_or_si256(nibbles32(x.qs), _mm256_andnot_si256(hb, _mm256_set1_epi8(static_cast<char>(0xF0))));
  }
  static float scale(const Block& x) { return h2f(x.d); }
};
struct Iq4nlW {
  using Block = block_iq4_nl;
  static __m256i codes(const Block& x) { return _mm256_shuffle_epi8(table16(kvalues_iq4nl), nibbles32(x.qs)); }
  static float scale(const Block& x) { return h2f(x.d); }
};
struct Mxfp4W {
  using Block = block_mxfp4;
  static __m256i codes(const Block& x) { return _mm256_shuffle_epi8(table16(kvalues_mxfp4), nibbles32(x.qs)); }
  static float scale(const Block& x) { return e8m0_half(x.e); }
};

template <class W>
struct Block32Gemm {
  static constexpr int kRows = 2, kCols = 2;  // 8 accumulators of the 16 registers
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* p, size_t ps, float* y, int64_t ldy) {
    using Block = typename W::Block;
    const int64_t nb = n / QK;
    __m256 acc[R][C][2];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
    auto block = [&](int64_t i, int j) __attribute__((always_inline)) {
      __m256i wc[R], wa[R];
      float dw[R];
      for (int r = 0; r < R; ++r) {
        const Block& x = reinterpret_cast<const Block*>(w + r * ws)[i];
        wc[r] = W::codes(x);
        wa[r] = _mm256_abs_epi8(wc[r]);
        dw[r] = W::scale(x);
      }
      for (int c = 0; c < C; ++c) {
        const block_q8_0& a = reinterpret_cast<const block_q8_0*>(p + c * ps)[i];
        const __m256i av = load256(a.qs);
        const float da = h2f(a.d);
        for (int r = 0; r < R; ++r)
          acc[r][c][j] = fma_block(dot_u8s8(wa[r], _mm256_sign_epi8(av, wc[r])), dw[r] * da, acc[r][c][j]);
      }
    };
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
      block(i, 0);
      block(i + 1, 1);
    }
    if (i < nb) block(i, 0);
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) y[c * ldy + r] = hsum(_mm256_add_ps(acc[r][c][0], acc[r][c][1]));
  }
};

// ---- 256-element super-blocks (K-quants) against Q8_K activations -------------------------------
//
// As in gemm_avx512.cpp: the same exact integers isum and msum per super-block as vec_dot (lanes
// split another way); the tile itself is KQuantGemm (gemm_tiles.inc), this file gives it the
// 256-bit unpacking and integer dot.

struct KDecoded {
  __m256i u[8];   // codes of elements 32k..32k+31, unsigned, element order
  __m256i sw[8];  // int16 per maddubs lane of chunk k (lanes 0-7: elements 32k..32k+15)
  __m256i m16;    // per 16-element sub-block: the min (msum) or the scale (offset correction)
  float dw, dmin;
};

template <class B, bool kFive>
struct Q45KW {
  using Block = B;
  static constexpr int kShift = -1;
  static void decode(const Block& x, KDecoded& d) {
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    const __m128i sm = q4k_scales(x.scales);
    __m256i hb;
    if constexpr (kFive) hb = load256(x.qh);
    for (int k = 0; k < 4; ++k) {
      const __m256i q = load256(x.qs + 32 * k);
      __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      if constexpr (kFive) {
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), b4));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 3), b4));
        hb = _mm256_srli_epi16(hb, 2);
      }
      d.u[2 * k] = lo, d.u[2 * k + 1] = hi;
      d.sw[2 * k] = byte_scale(sm, 2 * k), d.sw[2 * k + 1] = byte_scale(sm, 2 * k + 1);
    }
    const __m128i m = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
    d.m16 = _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
    d.dw = h2f(x.d), d.dmin = h2f(x.dmin);
  }
};

struct Q2KW {
  using Block = block_q2_K;
  static constexpr int kShift = -1;
  static void decode(const Block& x, KDecoded& d) {
    const __m128i raw = load128(x.scales);
    const __m128i sc = _mm_and_si128(raw, _mm_set1_epi8(15));
    for (int c = 0; c < 8; ++c) {
      d.u[c] = _mm256_and_si256(_mm256_srli_epi16(load256(x.qs + 32 * (c / 4)), 2 * (c % 4)), _mm256_set1_epi8(3));
      d.sw[c] = pair_scales(sc, c, false);
    }
    d.m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15)));
    d.dw = h2f(x.d), d.dmin = h2f(x.dmin);
  }
};

struct Q3KW {
  using Block = block_q3_K;
  static constexpr int kShift = 2;
  static void decode(const Block& x, KDecoded& d) {
    const __m256i m3 = _mm256_set1_epi8(3), b2 = _mm256_set1_epi8(4), hm = load256(x.hmask);
    const __m128i sc = q3k_scales(x.scales);
    for (int c = 0; c < 8; ++c) {
      const __m256i hbit = c >= 2 ? _mm256_srli_epi16(hm, c - 2) : _mm256_slli_epi16(hm, 2 - c);
      const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(load256(x.qs + 32 * (c / 4)), 2 * (c % 4)), m3);
      d.u[c] = _mm256_or_si256(lo, _mm256_and_si256(hbit, b2));
      d.sw[c] = pair_scales(sc, c, true);
    }
    d.m16 = _mm256_cvtepi8_epi16(sc);
    d.dw = h2f(x.d), d.dmin = 0.0f;
  }
};

struct Q6KW {
  using Block = block_q6_K;
  static constexpr int kShift = 5;
  static void decode(const Block& x, KDecoded& d) {
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    const __m128i sc = load128(x.scales);
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load256(x.ql + 64 * h), l1 = load256(x.ql + 64 * h + 32), qh = load256(x.qh + 32 * h);
      d.u[4 * h] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
      d.u[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
      d.u[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
      d.u[4 * h + 3] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
    }
    for (int c = 0; c < 8; ++c) d.sw[c] = pair_scales(sc, c, true);
    d.m16 = _mm256_cvtepi8_epi16(sc);
    d.dw = h2f(x.d), d.dmin = 0.0f;
  }
};

// The integer part of one output: one maddubs and one madd per 32 elements.
struct KDot {
  using Decoded = KDecoded;
  static const int8_t* act(const block_q8_K& a) { return a.qs; }
  static __m256i isum(const KDecoded& d, const int8_t* qs) {
    __m256i acc = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) acc = madd_acc(acc, _mm256_maddubs_epi16(d.u[k], load256(qs + 32 * k)), d.sw[k]);
    return acc;
  }
};

constexpr GemmKernel kQ80 = unpacked<Block32Gemm<Q80W>>();
constexpr GemmKernel kQ40 = unpacked<Block32Gemm<Q40W>>();
constexpr GemmKernel kQ50 = unpacked<Block32Gemm<Q50W>>();
constexpr GemmKernel kIq4nl = unpacked<Block32Gemm<Iq4nlW>>();
constexpr GemmKernel kMxfp4 = unpacked<Block32Gemm<Mxfp4W>>();
constexpr GemmKernel kQ2K = unpacked<KQuantGemm<Q2KW, KDot>>();
constexpr GemmKernel kQ3K = unpacked<KQuantGemm<Q3KW, KDot>>();
constexpr GemmKernel kQ4K = unpacked<KQuantGemm<Q45KW<block_q4_K, false>, KDot>>();
constexpr GemmKernel kQ5K = unpacked<KQuantGemm<Q45KW<block_q5_K, true>, KDot>>();
constexpr GemmKernel kQ6K = unpacked<KQuantGemm<Q6KW, KDot>>();

}  // namespace

namespace detail {

const GemmKernel* gemm_kernel_avx2(GgmlType t) {
  switch (t) {
    case GgmlType::Q8_0: return &kQ80;
    case GgmlType::Q4_0: return &kQ40;
    case GgmlType::Q5_0: return &kQ50;
    case GgmlType::IQ4_NL: return &kIq4nl;
    case GgmlType::MXFP4: return &kMxfp4;
    case GgmlType::Q2_K: return &kQ2K;
    case GgmlType::Q3_K: return &kQ3K;
    case GgmlType::Q4_K: return &kQ4K;
    case GgmlType::Q5_K: return &kQ5K;
    case GgmlType::Q6_K: return &kQ6K;
    default: return nullptr;
  }
}

}  // namespace detail
}  // namespace k3
