// AVX-512 matrix-matrix tiles, bit-identical per output to the AVX-512 vec_dot kernels of
// kernels_avx512.cpp (gemm.h). Each tile keeps, for every (row, token) output, the accumulators
// that vec_dot keeps, updated by the same operations in the same order; the loads and the
// unpacking of a weight block (or of an activation block) happen once per tile instead of once
// per output.
// Only file-local code here (kernels_impl.h explains why).
#include "tensor/avx512.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "tensor/blocks.h"
#include "tensor/gemm.h"
#include "tensor/ggml_order.h"
#include "tensor/iq3_grids.h"
#include "tensor/iq_grids.h"

namespace k3 {
namespace {

// ---- helpers, the same operations as kernels_avx512.cpp / simd256_dot.inc -----------------------

// Defined through the 256-bit files below too (their AVX-512 VL forms, ElemTile's 2 x 4 outputs, the
// 512-bit decode rows of Q8_0_X8 and tiles of MXFP4_LANES); it was undefined here after this file
// alone, which left those forms out of the build.
#define K3_AVX512 1
#include "tensor/simd256_common.inc"

inline float f32_at(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
inline float f16_at(const void* p, int64_t i) { return h2f(static_cast<const uint16_t*>(p)[i]); }
inline float bf16_at(const void* p, int64_t i) {
  const uint32_t b = static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
// Pins a loaded vector in a register: otherwise GCC folds the load into every FMA that uses it,
// which makes the tile as load-bound as vec_dot.
template <class V>
inline V in_reg(V v) {
  __asm__("" : "+v"(v));
  return v;
}

inline __m512 load16_f32(const void* p, int64_t i) { return _mm512_loadu_ps(static_cast<const float*>(p) + i); }
inline __m512 load16_f16(const void* p, int64_t i) { return _mm512_cvtph_ps(load256(static_cast<const uint16_t*>(p) + i)); }

#include "tensor/gemm_tiles.inc"

// ---- float types: vec_dot_float512 (ggml's order: four accumulators over 64 elements, its tail) ---
// kPrefetch: the bytes of a 64-element step of a weight row that the tile requests ahead of it
// (GemmKernel::few, each row a stream, as Bf16Gemm); 0: none (prefill's tiles, and F32's few-token
// tiles, whose two far-apart streams the hardware prefetcher follows: bench_kernels few_tokens/f32
// at 2-4 tokens read 0.57-0.85 of the probe's rate without, 0.44-0.72 with, main's tiles 0.52-0.81:
// docs/notes/i38f.md).

template <__m512 (*load16)(const void*, int64_t), float (*at)(const void*, int64_t), size_t kPrefetch = 0>
struct FloatGemm {
  static constexpr int kRows = 2, kCols = 3;  // 24 accumulators
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* p, size_t ps, float* y, int64_t ldy) {
    __m512 acc[R][C][4];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c)
        for (int j = 0; j < 4; ++j) acc[r][c][j] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
      if constexpr (kPrefetch > 0)
        for (int r = 0; r < R; ++r) prefetch_span<kPrefetch>(w + r * ws + i * (kPrefetch / 64));
      for (int j = 0; j < 4; ++j) {
        __m512 wv[R];
        for (int r = 0; r < R; ++r) wv[r] = in_reg(load16(w + r * ws, i + 16 * j));
        for (int c = 0; c < C; ++c) {
          const __m512 av = in_reg(load16(p + c * ps, i + 16 * j));
          for (int r = 0; r < R; ++r) acc[r][c][j] = _mm512_fmadd_ps(wv[r], av, acc[r][c][j]);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        const __m512* a = acc[r][c];
        const uint8_t *wr = w + r * ws, *pc = p + c * ps;
        y[c * ldy + r] = ggml_dot_tail<16, load16 == load16_f16>(
            hsum512(_mm512_add_ps(_mm512_add_ps(a[0], a[2]), _mm512_add_ps(a[1], a[3]))), i, n,
            [&](int64_t k) { return at(wr, k); }, [&](int64_t k) { return at(pc, k); });
      }
  }
};

// BF16: vec_dot_bf16_512 (dpbf16ps, two accumulators over 64 elements, then 32-steps). kPrefetch
// (GemmKernel::few, each row a stream): 128 bytes of each row a step.
template <bool kPrefetch>
struct Bf16Gemm {
  static constexpr int kRows = 2, kCols = 4;
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* p, size_t ps, float* y, int64_t ldy) {
    auto ld = [](const uint8_t* row, int64_t i) { return (__m512bh)load512(reinterpret_cast<const uint16_t*>(row) + i); };
    __m512 acc[R][C][2];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
      if constexpr (kPrefetch)
        for (int r = 0; r < R; ++r) prefetch_span<128>(w + r * ws + 2 * i);
      for (int j = 0; j < 2; ++j) {
        __m512bh wv[R];
        for (int r = 0; r < R; ++r) wv[r] = in_reg(ld(w + r * ws, i + 32 * j));
        for (int c = 0; c < C; ++c) {
          const __m512bh av = in_reg(ld(p + c * ps, i + 32 * j));
          for (int r = 0; r < R; ++r) acc[r][c][j] = _mm512_dpbf16_ps(acc[r][c][j], wv[r], av);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        const uint8_t *wr = w + r * ws, *pc = p + c * ps;
        y[c * ldy + r] = bf16_dot_tail(acc[r][c][0], acc[r][c][1], i, n, [&](int64_t k) { return bf16_at(wr, k); },
                                       [&](int64_t k) { return bf16_at(pc, k); });
      }
  }
};

// ---- 32-element blocks against Q8_0 activations (Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4) -------------
//
// Their vec_dot is the 256-bit one (simd256_block32.inc: the scalar reference's summation), so
// their tiles and decode rows are the 256-bit ones too, compiled here with the AVX-512 VL forms.
// Measured on AMD Zen 4 against the former 512-bit kernels (16 blocks per step): decode 1.25-1.33x
// as fast, prefill 1.07x (docs/performance.md).

#include "tensor/simd256_block32.inc"
#include "tensor/simd256_lowbit.inc"
#include "tensor/gemm_block32.inc"
#include "tensor/gemm_lanes.inc"
#include "tensor/gemm_q4k_lanes.inc"
#include "tensor/simd256_elem.inc"
#include "tensor/gemm_elem.inc"
#include "tensor/gemm_lowbit.inc"
#include "tensor/simd256_iq.inc"
#undef K3_AVX512

// ---- 256-element super-blocks (K-quants) against Q8_K activations -------------------------------
//
// Every K-quant vec_dot forms, per super-block, the int32 lanes of isum (Σ scale·Σ code·a) and
// msum (Σ min·bsum) of the scalar reference (dot_ref.cpp KqLanes: lane l takes the elements e with
// e % 32 in [4l, 4l + 4)) and hands them with d_a, d_w, dmin to KqSum for the float part. The tile
// forms the same lanes (its 16 lanes of a 64-element chunk, the halves added) and the same float
// part: the weight super-block is unpacked once per tile into unsigned codes and int16 scale
// words, and each (row, token) output costs one maddubs and one dpwssd per 64 elements. Q3_K and
// Q6_K codes carry an offset, subtracted as offset·Σ scale·bsum from isum, exactly as their
// vec_dot does.

struct KDecoded {
  __m512i u[4];   // codes of elements 64k..64k+63, unsigned, element order
  __m512i sw[4];  // int16 per maddubs lane: lanes 8s..8s+7 of chunk k hold sub-block 4k+s's scale
  __m256i m16;    // per 16-element sub-block: the min (msum) or the scale (offset correction)
  float dw, dmin;
};

// Scale words from 16 int16 sub-block scales (lane j: sub-block j of 16 elements).
inline void scale_words(__m256i s16, __m512i (&sw)[4]) {
  const __m512i s = _mm512_castsi256_si512(s16);
  __m512i idx = _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                                   15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3);
  for (int k = 0; k < 4; ++k, idx = _mm512_add_epi16(idx, _mm512_set1_epi16(4))) sw[k] = _mm512_permutexvar_epi16(idx, s);
}
constexpr __mmask32 kHighHalf = 0xFFFF0000u;  // the 16 words of a register's high 256 bits
// Q4_K / Q5_K: chunk k is sub-blocks 2k (low nibbles of qs[32k..]) and 2k+1 (high nibbles); the
// fifth bits of Q5_K are bits 2k and 2k+1 of qh[l]. 6-bit scales and mins per 32 elements.
template <class B, bool kFive>
struct Q45KW {
  using Block = B;
  static constexpr int kShift = -1;  // m16 holds mins
  static void decode(const Block& x, KDecoded& d) {
    // chunk k: one broadcast of qs[32k..], its high half shifted by 4 (a masked shift), both masked;
    // Q5_K's fifth bits from a broadcast of qh whose high half is one place lower, shifted by 2 a
    // chunk and merged by one vpternlogd (where joining two 256-bit halves took twice the operations)
    const __m512i m4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16);
    __m512i hb;
    if constexpr (kFive) {
      const __m512i h = _mm512_broadcast_i64x4(load256(x.qh));
      hb = _mm512_mask_srli_epi16(h, kHighHalf, h, 1);
    }
    for (int k = 0; k < 4; ++k) {
      const __m512i q = _mm512_broadcast_i64x4(load256(x.qs + 32 * k));
      d.u[k] = _mm512_and_si512(_mm512_mask_srli_epi16(q, kHighHalf, q, 4), m4);
      if constexpr (kFive) {
        d.u[k] = _mm512_ternarylogic_epi32(d.u[k], _mm512_slli_epi16(hb, 4), b4, 0xF8);  // a | (b & c)
        hb = _mm512_srli_epi16(hb, 2);
      }
    }
    const __m128i sm = q4k_scales(x.scales);
    const __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    scale_words(_mm256_cvtepu8_epi16(_mm_shuffle_epi8(sm, dup)), d.sw);
    d.m16 = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(_mm_srli_si128(sm, 8), dup));
    d.dw = h2f(x.d), d.dmin = h2f(x.dmin);
  }
};

// Q2_K: element 32c + l is bits 2j..2j+1 of qs[32h + l] (c = 4h + j); 4-bit scale and min per 16.
// Chunks 2k and 2k + 1 (k = 2h + j) are qs[32h..] shifted by 4j and 4j + 2: q2k_pair(qs + 32h) is
// both halves of one broadcast, the high one shifted by 2 (a masked shift), and j = 1 one shift by 4
// more, where joining two 256-bit chunks took twice the operations.
inline __m512i q2k_pair(const uint8_t* qs) {
  const __m512i b = _mm512_broadcast_i64x4(load256(qs));
  return _mm512_mask_srli_epi16(b, kHighHalf, b, 2);
}
struct Q2KW {
  using Block = block_q2_K;
  static constexpr int kShift = -1;
  static void decode(const Block& x, KDecoded& d) {
    const __m512i m3 = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m512i s = q2k_pair(x.qs + 32 * h);
      d.u[2 * h] = _mm512_and_si512(s, m3);
      d.u[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(s, 4), m3);
    }
    const __m128i raw = load128(x.scales);
    scale_words(_mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(15))), d.sw);
    d.m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15)));
    d.dw = h2f(x.d), d.dmin = h2f(x.dmin);
  }
};

// Q3_K: 2 low bits as Q2_K, the third from bit c of hmask[l]; codes carry +4; signed 6-bit scales.
struct Q3KW {
  using Block = block_q3_K;
  static constexpr int kShift = 2;
  static void decode(const Block& x, KDecoded& d) {
    // the low bits as Q2_K's; the high bit of chunk c is moved to bit 2 by a shift of c - 2, the
    // high half (chunk 2k + 1) one place further by a masked shift of the broadcast hmask
    const __m512i m3 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4), hb = _mm512_broadcast_i64x4(load256(x.hmask));
    const __m512i hm = _mm512_mask_srli_epi16(hb, kHighHalf, hb, 1);
    for (int h = 0; h < 2; ++h) {
      const __m512i s = q2k_pair(x.qs + 32 * h);
      for (int j = 0; j < 2; ++j) {
        const int k = 2 * h + j;
        const __m512i hbit = k == 0 ? _mm512_slli_epi16(hm, 2) : _mm512_srli_epi16(hm, 2 * k - 2);
        d.u[k] = _mm512_ternarylogic_epi32(j ? _mm512_srli_epi16(s, 4) : s, _mm512_and_si512(hbit, b2), m3, 0xEC);  // (a & c) | b
      }
    }
    d.m16 = _mm256_cvtepi8_epi16(q3k_scales(x.scales));
    scale_words(d.m16, d.sw);
    d.dw = h2f(x.d), d.dmin = 0.0f;
  }
};

// Q6_K: 4 low bits from ql, 2 high from qh (see vec_dot_q6_K); codes carry +32; int8 scales.
struct Q6KW {
  using Block = block_q6_K;
  static constexpr int kShift = 5;
  static void decode(const Block& x, KDecoded& d) {
    // chunks 4h, 4h + 1 (u[2h]) are the low nibbles of ql[64h..], 4h + 2, 4h + 3 the high ones; their
    // high bits are bits 0-1, 2-3 (and 4-5, 6-7) of qh[32h..]: one broadcast of qh whose high half is
    // shifted by 2 (a masked shift) serves both registers, each merged by one vpternlogd
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    for (int h = 0; h < 2; ++h) {
      const __m512i l = load512(x.ql + 64 * h), b = _mm512_broadcast_i64x4(load256(x.qh + 32 * h));
      const __m512i qh = _mm512_mask_srli_epi16(b, kHighHalf, b, 2);
      d.u[2 * h] = _mm512_ternarylogic_epi32(l, _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30), m4, 0xEC);  // (a & c) | b
      d.u[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), _mm512_and_si512(qh, m30), m4, 0xEC);
    }
    d.m16 = _mm256_cvtepi8_epi16(load128(x.scales));
    scale_words(d.m16, d.sw);
    d.dw = h2f(x.d), d.dmin = 0.0f;
  }
};

// Two tokens' outputs of one row in one register: the unfolded sums s0, s1 of both (halves: chunks
// 2k | 2k + 1) folded into token 0's 8 lanes | token 1's 8 lanes.
inline __m512i fold_pair(__m512i s0, __m512i s1) {
  return _mm512_add_epi32(_mm512_shuffle_i64x2(s0, s1, 0x44), _mm512_shuffle_i64x2(s0, s1, 0xEE));
}

// KqSum of two tokens (token 0 in the low half, token 1 in the high half): each half's lanes take
// KqSum::add's operations, so each output keeps its bits. dadw: da·dw of each token in its half
// (the same product as KqSum's), dadmin likewise.
struct KqSumPair {
  __m512 acc = _mm512_setzero_ps();
  void add(__m512i isum, __m512i msum, __m512 dadw, __m512 dadmin) {
    acc = _mm512_fnmadd_ps(dadmin, _mm512_cvtepi32_ps(msum), acc);
    add(isum, dadw);
  }
  void add(__m512i isum, __m512 dadw) { acc = _mm512_fmadd_ps(dadw, _mm512_cvtepi32_ps(isum), acc); }
  float lo() const { return hsum(_mm512_castps512_ps256(acc)); }
  float hi() const { return hsum(_mm512_extractf32x8_ps(acc, 1)); }
};

// A pair tile's outputs: ks[j * R + r] holds tokens 2j | 2j + 1 of row r, of nt tokens.
template <int R>
void store_pairs(const KqSumPair* ks, int nt, float* y, int64_t ldy) {
  for (int j = 0; 2 * j < nt; ++j)
    for (int r = 0; r < R; ++r) {
      y[2 * j * ldy + r] = ks[j * R + r].lo();
      if (2 * j + 1 < nt) y[(2 * j + 1) * ldy + r] = ks[j * R + r].hi();
    }
}

// [da of token 0 | da of token 1] (8 lanes each).
inline __m512 da_pair(float d0, float d1) { return _mm512_insertf32x8(_mm512_set1_ps(d0), _mm256_set1_ps(d1), 1); }

// The integer part of one output: one maddubs and one dpwssd per 64 elements; the activation
// super-block is loaded once per token for all rows of the tile.
struct KDot {
  using Decoded = KDecoded;
  struct Act {
    __m512i v[4];
  };
  static Act act(const block_q8_K& a) {
    Act x;
    for (int k = 0; k < 4; ++k) x.v[k] = in_reg(load512(a.qs + 64 * k));
    return x;
  }
  static __m256i isum(const KDecoded& d, const Act& x, __m256i init = _mm256_setzero_si256()) {
    __m512i acc = _mm512_zextsi256_si512(init);
    for (int k = 0; k < 4; ++k) acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(d.u[k], x.v[k]), d.sw[k]);
    return fold_lanes(acc);
  }
};

// ---- the lattice types (simd256_iq.inc) ----------------------------------------------------------
//
// As the 256-bit tiles (gemm_simd256.inc): WideGemm's (IQ1_S: WidePairGemm's, below), each isum
// from its super-block's constant term (IQ1 shift terms, IQ2 bias correction). Each 64-value chunk
// joins two of the 256-bit decode's chunks, so the lanes are the same.

// IQ1_M: unsigned codes through KDot.
template <class W>
struct Iq1Lattice {
  using Block = typename W::Block;
  using Decoded = KDecoded;  // m16: the shift terms (v16)
  static void decode(const Block& x, KDecoded& d) {
    const IqHead h = W::head(x);
    __m256i u[8];
    unroll(std::make_integer_sequence<int, 8>{}, [&](auto C) {
      __m256i unused;
      W::template chunk<C>(x, h, u[C], unused);
    });
    for (int k = 0; k < 4; ++k) d.u[k] = join256(u[2 * k], u[2 * k + 1]);
    scale_words(h.s16, d.sw);
    d.m16 = h.v16;
    d.dw = h.dw, d.dmin = 0.0f;
  }
  using Act = KDot::Act;
  static Act act(const block_q8_K& a) { return KDot::act(a); }
  static __m256i isum(const KDecoded& d, const Act& x, const block_q8_K& a) {
    return KDot::isum(d, x, _mm256_madd_epi16(load256(a.bsums), d.m16));
  }
};

// IQ1_S: the codes times 8·scale (at most 240, one mullo per chunk as at 256 bits), one dpbusd per
// 64 values. The 32 grid entries of a super-block are 4 gathers of 8: entry g's index is qs[g] and,
// as bits 8-10, bits 3(g % 4).. of qh[g / 4] (Iq1sW::chunk's).
struct Iq1sLattice {
  using Block = block_iq1_s;
  struct Decoded {
    __m512i u[4];
    __m256i v16;
    float dw;
  };
  static void decode(const Block& x, Decoded& d) {
    const IqHead h = Iq1sW::head(x);
    const __m512i qh8 = _mm512_slli_epi32(_mm512_castsi256_si512(_mm256_cvtepu16_epi32(load128(x.qh))), 8);
    const __m512i shift = _mm512_set_epi32(9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0, 9, 6, 3, 0);
    __m512i sw[4];
    scale_words(h.s16, sw);
    for (int half = 0; half < 2; ++half) {  // entries 16·half..16·half + 15
      const __m512i word = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
      const __m512i hi = _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(word, _mm512_set1_epi32(4 * half)), qh8), shift);
      const __m512i idx = _mm512_or_si512(_mm512_cvtepu8_epi32(load128(x.qs + 16 * half)), _mm512_and_si512(hi, _mm512_set1_epi32(0x700)));
      const __m512i lo = _mm512_i32gather_epi64(_mm512_castsi512_si256(idx), kIqGrids.iq1s, 8);
      const __m512i up = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(idx, 1), kIqGrids.iq1s, 8);
      d.u[2 * half] = _mm512_mullo_epi16(lo, sw[2 * half]);
      d.u[2 * half + 1] = _mm512_mullo_epi16(up, sw[2 * half + 1]);
    }
    d.v16 = h.v16;
    d.dw = h.dw;
  }
  using Act = KDot::Act;
  static Act act(const block_q8_K& a) { return KDot::act(a); }
  static __m512i raw(const Decoded& d, const Act& x) {
    __m512i acc = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) acc = _mm512_dpbusd_epi32(acc, d.u[k], x.v[k]);
    return acc;
  }
  // The shift terms against the bsums of tokens 0 | 1.
  static __m512i init(const Decoded& d, const block_q8_K& a0, const block_q8_K& a1) {
    return _mm512_madd_epi16(pair256(a0.bsums, a1.bsums), _mm512_broadcast_i64x4(d.v16));
  }
};

// A lattice tile at 512 bits: as WideGemm (each weight super-block decoded once per call of up to
// kTokens tokens), but the tokens go two at a time, so that the fold to the reference's lanes, the
// conversion and the FMA serve two outputs per instruction. L gives Block, Decoded (with dw),
// decode, act, raw (an output's unfolded 16 lanes) and init (both tokens' constant terms).
template <class L, int Rows>
struct WidePairGemm {
  static constexpr int kTokens = 64;
  template <int R>
  __attribute__((flatten)) static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* p, size_t ps, int nt, float* y,
                                            int64_t ldy) {
    using Block = typename L::Block;
    const int pairs = (nt + 1) / 2;  // an odd count's last token pairs with itself
    typename L::Decoded d[R];
    KqSumPair ks[R * kTokens / 2];
    for (int64_t i = 0; i < n / QK_K; ++i) {
      for (int r = 0; r < R; ++r) L::decode(reinterpret_cast<const Block*>(w + r * ws)[i], d[r]);
      for (int j = 0; j < pairs; ++j) {
        const block_q8_K& a0 = reinterpret_cast<const block_q8_K*>(p + 2 * j * ps)[i];
        const block_q8_K& a1 = reinterpret_cast<const block_q8_K*>(p + std::min(2 * j + 1, nt - 1) * ps)[i];
        const auto x0 = L::act(a0), x1 = L::act(a1);
        const __m512 da = da_pair(a0.d, a1.d);
        for (int r = 0; r < R; ++r)
          ks[j * R + r].add(_mm512_add_epi32(fold_pair(L::raw(d[r], x0), L::raw(d[r], x1)), L::init(d[r], a0, a1)),
                            _mm512_mul_ps(da, _mm512_set1_ps(d[r].dw)));
      }
    }
    store_pairs<R>(ks, nt, y, ldy);
  }
  static void run(int64_t n, const void* w, size_t ws, int64_t nr, const void* p, size_t ps, int64_t nt, float* y, int64_t ldy) {
    wide_run<WidePairGemm, Rows>(n, w, ws, nr, p, ps, nt, y, ldy);
  }
};

// IQ2: activations biased by 128 (iq2_pack), from minus the bias's share.
template <class W>
struct Iq2Lattice {
  using Block = typename W::Block;
  struct Decoded {
    __m512i w[4];   // signed codes of elements 64k..64k+63
    __m512i sw[4];  // their scale words
    __m256i ncorr;  // −128·Σ scale·w per lane
    float dw;
  };
  static void decode(const Block& x, Decoded& d) {
    const IqHead h = W::head(x);
    __m256i w[8], sw[8];
    d.ncorr = _mm256_sub_epi32(_mm256_setzero_si256(), iq2_signed_chunks<W>(x, h, w, sw));
    for (int k = 0; k < 4; ++k) d.w[k] = join256(w[2 * k], w[2 * k + 1]), d.sw[k] = join256(sw[2 * k], sw[2 * k + 1]);
    d.dw = h.dw;
  }
  using Act = KDot::Act;
  static Act act(const block_q8_K& a) { return KDot::act(a); }
  static __m256i isum(const Decoded& d, const Act& x, const block_q8_K&) {
    __m512i acc = _mm512_zextsi256_si512(d.ncorr);
    for (int k = 0; k < 4; ++k) acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(x.v[k], d.w[k]), d.sw[k]);
    return fold_lanes(acc);
  }
};

template <class W>
constexpr GemmKernel iq2_kernel() { return wide_kernel<WideGemm<Iq2Lattice<W>, 1>>(iq2_packed_size, iq2_pack); }

// Q4_K_LANES (gemm_q4k_lanes.inc) at 512 bits: weight vector v's low and high nibbles (chunks v and
// v + 4) in one register against one 64-byte load of the packed activation, 4 vpdpbusd; the two
// halves' int32 lanes added (the same exact sums), then scaled as the 256-bit form does.
struct Q4KlDecoded512 {
  __m512i u[4];  // chunks v (low half) and v + 4 (high half)
  __m256i sw, m16;
  float dw, dmin;
};
struct Q4KlW512 {
  using Block = block_q4_Kl;
  static constexpr int kShift = -1;
  static void decode(const Block& x, Q4KlDecoded512& d) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    for (int v = 0; v < 4; ++v)
      d.u[v] = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(load256(x.qs + 32 * v)), shift), m4);
    q4kl_scales(x, d);
  }
};
struct Q4KlDot512 {
  using Decoded = Q4KlDecoded512;
  static const int8_t* act(const Q4KlAct& a) { return a.qs; }
  // The unfolded sums: chunk v's lanes in the low half, chunk v + 4's in the high half.
  static __m512i raw(const Q4KlDecoded512& d, const int8_t* qs) {
    __m512i acc = _mm512_setzero_si512();
    for (int v = 0; v < 4; ++v) acc = _mm512_dpbusd_epi32(acc, d.u[v], load512(qs + 64 * v));
    return acc;
  }
  static __m256i isum(const Q4KlDecoded512& d, const int8_t* qs) { return _mm256_mullo_epi32(fold_lanes(raw(d, qs)), d.sw); }
};

// Q4_K_LANES prefill tiles at 512 bits: KQuantGemm's outputs (Q4KlW512, Q4KlDot512), two tokens
// at a time as the lattice's WidePairGemm takes them: the fold of both tokens' halves, the scale
// multiply, the mins' madd, the conversions and the two FMAs each serve two outputs.
template <int Rows, int Cols>
struct Q4KlPairGemm {
  static constexpr int kRows = Rows, kCols = Cols;
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* p, size_t ps, float* y, int64_t ldy) {
    constexpr int P = (C + 1) / 2;  // an odd count's last token pairs with itself
    Q4KlDecoded512 d[R];
    KqSumPair ks[R * P];
    for (int64_t i = 0; i < n / QK_K; ++i) {
      for (int r = 0; r < R; ++r) Q4KlW512::decode(reinterpret_cast<const block_q4_Kl*>(w + r * ws)[i], d[r]);
      for (int j = 0; j < P; ++j) {
        const Q4KlAct& a0 = reinterpret_cast<const Q4KlAct*>(p + 2 * j * ps)[i];
        const Q4KlAct& a1 = reinterpret_cast<const Q4KlAct*>(p + std::min(2 * j + 1, C - 1) * ps)[i];
        const __m512 da = da_pair(a0.d, a1.d);
        const __m512i bs = pair256(a0.bsums, a1.bsums);
        for (int r = 0; r < R; ++r) {
          const __m512i isum = _mm512_mullo_epi32(fold_pair(Q4KlDot512::raw(d[r], a0.qs), Q4KlDot512::raw(d[r], a1.qs)),
                                                  _mm512_broadcast_i64x4(d[r].sw));
          const __m512i m = _mm512_madd_epi16(bs, _mm512_broadcast_i64x4(d[r].m16));
          ks[j * R + r].add(isum, m, _mm512_mul_ps(da, _mm512_set1_ps(d[r].dw)), _mm512_mul_ps(da, _mm512_set1_ps(d[r].dmin)));
        }
      }
    }
    store_pairs<R>(ks, C, y, ldy);
  }
};

template <__m512 (*load16)(const void*, int64_t), float (*at)(const void*, int64_t), size_t kFewPrefetch>
constexpr GemmKernel float_kernel() {
  return {no_pack_size, nullptr, run_tiles<FloatGemm<load16, at>>, nullptr, 0, false, few_parts<FloatGemm<load16, at, kFewPrefetch>>};
}
// F32 decodes by vec_dot a row at either setting of decode_in_parts: it reads 0.93-0.98 of the probe
// from DRAM here, the tile over two rows in parts no more (bench_kernels matvec/f32, docs/notes/i37o.md).
constexpr GemmKernel kF32 = float_kernel<load16_f32, f32_at, 0>();
// [decode_in_parts()]: decode by vec_dot a row, or by the tile over two rows in parts (kernels.h).
constexpr std::array<GemmKernel, 2> kF16 =
    with_rows_in_parts<FloatGemm<load16_f16, f16_at, 128>>(float_kernel<load16_f16, f16_at, 128>());
constexpr std::array<GemmKernel, 2> kBf16 = with_rows_in_parts<Bf16Gemm<true>>(
    {no_pack_size, nullptr, run_tiles<Bf16Gemm<false>>, nullptr, 0, false, few_parts<Bf16Gemm<true>>});
constexpr GemmKernel kQ80 = elem_kernel<Q80E>();
constexpr std::array<GemmKernel, 2> kQ40 = block32_kernels<Q40B>();
constexpr std::array<GemmKernel, 2> kIq4nl = block32_kernels<Iq4nlB>();
constexpr std::array<GemmKernel, 2> kMxfp4 = block32_kernels<Mxfp4B>();
// [decode_in_parts()]
constexpr std::array<GemmKernel, 2> kMxfp4Lanes = lanes_kernels<Mxfp4LanesW>();
constexpr std::array<GemmKernel, 2> kMxfp4LanesRows256 = lanes_kernels<Mxfp4LanesW, false>();
constexpr GemmKernel kQ4KLanes = q4kl_kernels<Q4KlW512, Q4KlDot512, Q4KlPairGemm<2, 8>>()[1];
constexpr GemmKernel kQ80X8 = elem_kernel<Q80X8E, true>();
constexpr GemmKernel kQ80X8Run256 = elem_kernel<Q80X8E>();
constexpr GemmKernel kQ50 = elem_kernel<Q50E>();
// Q2_K (also repacked) and Q3_K decode in two parts on every CPU (two rows' chains and streams):
// on Zen 5 1.28-1.44x vec_dot in cache, m64 with their trunks 1.04-1.14x one row at a time
// (docs/performance.md).
constexpr GemmKernel kQ2K = unpacked_in_parts<KQuantGemm<Q2KW, KDot>>()[1];
constexpr GemmKernel kQ2KSb = unpacked_in_parts<KQuantGemm<Q2KW, KDot, 2, 8, KqBlockSum>>()[1];
constexpr GemmKernel kQ3K = unpacked_in_parts<KQuantGemm<Q3KW, KDot>>()[1];
constexpr GemmKernel kQ4K = unpacked<KQuantGemm<Q45KW<block_q4_K, false>, KDot>>();
// Q5_K likewise: 1.20-1.25x vec_dot in cache, m64 with a Q5_K trunk 1.08 / 1.11 at 1 / 2 threads.
constexpr GemmKernel kQ5K = unpacked_in_parts<KQuantGemm<Q45KW<block_q5_K, true>, KDot>>()[1];
constexpr std::array<GemmKernel, 2> kQ6K = unpacked_in_parts<KQuantGemm<Q6KW, KDot>>();
// The types of simd256_lowbit.inc: their 256-bit forms, as their vec_dot.
constexpr GemmKernel kQ10 = block32_kernel<Q10B>();
constexpr GemmKernel kQ20 = block32_kernel<Q20B>();
constexpr GemmKernel kNvfp4 = nvfp4_kernel();
constexpr GemmKernel kTq1 = unpacked<KQuantGemm<Tq1W, TqDot>>();
constexpr GemmKernel kTq2 = unpacked<KQuantGemm<Tq2W, TqDot>>();
constexpr GemmKernel kIq3xxs = iq3_kernel<Iq3xxsW>();
constexpr GemmKernel kIq3s = iq3_kernel<Iq3sW>();
constexpr GemmKernel kIq2xxs = iq2_kernel<Iq2xxsW>();
constexpr GemmKernel kIq2xs = iq2_kernel<Iq2xsW>();
constexpr GemmKernel kIq2s = iq2_kernel<Iq2sW>();
constexpr GemmKernel kIq1s = wide_kernel<WidePairGemm<Iq1sLattice, 2>>();
constexpr GemmKernel kIq1m = wide_kernel<WideGemm<Iq1Lattice<Iq1mW>, 1>>();

}  // namespace

namespace detail {

const GemmKernel* gemm_kernel_avx512(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return &kF32;
    case GgmlType::F16: return &kF16[decode_in_parts()];
    case GgmlType::BF16: return &kBf16[decode_in_parts()];
    case GgmlType::Q8_0: return &kQ80;
    case GgmlType::Q4_0: return &kQ40[decode_in_parts()];
    case GgmlType::IQ4_NL: return &kIq4nl[decode_in_parts()];
    case GgmlType::MXFP4: return &kMxfp4[decode_in_parts()];
    case GgmlType::MXFP4_LANES: return &(full_width_512() ? kMxfp4Lanes : kMxfp4LanesRows256)[decode_in_parts()];
    case GgmlType::Q8_0_X8: return full_width_512() ? &kQ80X8 : &kQ80X8Run256;
    case GgmlType::Q5_0: return &kQ50;
    case GgmlType::Q2_K: return &kQ2K;
    case GgmlType::Q2_K_SB: return &kQ2KSb;
    case GgmlType::Q3_K: return &kQ3K;
    case GgmlType::Q4_K: return &kQ4K;
    case GgmlType::Q4_K_LANES: return &kQ4KLanes;
    case GgmlType::Q5_K: return &kQ5K;
    case GgmlType::Q6_K: return &kQ6K[decode_in_parts()];
    case GgmlType::Q1_0: return &kQ10;
    case GgmlType::Q2_0: return &kQ20;
    case GgmlType::NVFP4: return &kNvfp4;
    case GgmlType::TQ1_0: return &kTq1;
    case GgmlType::TQ2_0: return &kTq2;
    case GgmlType::IQ3_XXS: return &kIq3xxs;
    case GgmlType::IQ3_S: return &kIq3s;
    case GgmlType::IQ2_XXS: return &kIq2xxs;
    case GgmlType::IQ2_XS: return &kIq2xs;
    case GgmlType::IQ2_S: return &kIq2s;
    case GgmlType::IQ1_S: return &kIq1s;
    case GgmlType::IQ1_M: return &kIq1m;
    default: return nullptr;
  }
}

}  // namespace detail
}  // namespace k3
