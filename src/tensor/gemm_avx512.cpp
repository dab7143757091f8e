// AVX-512 matrix-matrix tiles, bit-identical per output to the AVX-512 vec_dot kernels of
// kernels_avx512.cpp (gemm.h). Each tile keeps, for every (row, token) output, the accumulators
// that vec_dot keeps, updated by the same operations in the same order; the loads and the
// unpacking of a weight block (or of an activation block) happen once per tile instead of once
// per output.
// Only file-local code here (kernels_impl.h explains why).
#include "tensor/avx512.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "tensor/blocks.h"
#include "tensor/gemm.h"

namespace k3 {
namespace {

// ---- helpers, the same operations as kernels_avx512.cpp / simd256_dot.inc -----------------------

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline __m512i pair256(const void* lo, const void* hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load256(lo)), load256(hi), 1);
}
inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hsum512(__m512 v) {
  return hsum256(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
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

// ---- tiling -----------------------------------------------------------------------------------

// One tile: R weight rows (w, ws bytes apart) × C activation rows (p, ps bytes apart) into
// y[c * ldy + r].
using TileFn = void (*)(int64_t n, const uint8_t* w, size_t ws, const uint8_t* p, size_t ps, float* y, int64_t ldy);

template <class K, int... I>
constexpr std::array<TileFn, sizeof...(I)> tile_table(std::integer_sequence<int, I...>) {
  return {&K::template tile<I / K::kCols + 1, I % K::kCols + 1>...};
}

// Rows outer (a tile's weight rows stay in L1 while the token tiles pass), edge tiles smaller.
template <class K>
void run_tiles(int64_t n, const void* w, size_t ws, int64_t nr, const void* p, size_t ps, int64_t nt, float* y, int64_t ldy) {
  static constexpr auto table = tile_table<K>(std::make_integer_sequence<int, K::kRows * K::kCols>{});
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* pb = static_cast<const uint8_t*>(p);
  for (int64_t r0 = 0; r0 < nr; r0 += K::kRows) {
    const int r = static_cast<int>(std::min<int64_t>(K::kRows, nr - r0));
    for (int64_t t0 = 0; t0 < nt; t0 += K::kCols) {
      const int c = static_cast<int>(std::min<int64_t>(K::kCols, nt - t0));
      table[(r - 1) * K::kCols + (c - 1)](n, wb + r0 * ws, ws, pb + t0 * ps, ps, y + t0 * ldy + r0, ldy);
    }
  }
}

// ---- float types: vec_dot_float512 (four accumulators over 64 elements, then 16-steps) ----------

template <__m512 (*load16)(const void*, int64_t), float (*at)(const void*, int64_t)>
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
      for (int j = 0; j < 4; ++j) {
        __m512 wv[R];
        for (int r = 0; r < R; ++r) wv[r] = in_reg(load16(w + r * ws, i + 16 * j));
        for (int c = 0; c < C; ++c) {
          const __m512 av = in_reg(load16(p + c * ps, i + 16 * j));
          for (int r = 0; r < R; ++r) acc[r][c][j] = _mm512_fmadd_ps(wv[r], av, acc[r][c][j]);
        }
      }
    }
    for (; i + 16 <= n; i += 16) {
      for (int c = 0; c < C; ++c) {
        const __m512 av = load16(p + c * ps, i);
        for (int r = 0; r < R; ++r) acc[r][c][0] = _mm512_fmadd_ps(load16(w + r * ws, i), av, acc[r][c][0]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        const __m512* a = acc[r][c];
        float sum = hsum512(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
        for (int64_t k = i; k < n; ++k) sum += at(w + r * ws, k) * at(p + c * ps, k);
        y[c * ldy + r] = sum;
      }
  }
};

// BF16: vec_dot_bf16_512 (dpbf16ps, two accumulators over 64 elements, then 32-steps).
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
      for (int j = 0; j < 2; ++j) {
        __m512bh wv[R];
        for (int r = 0; r < R; ++r) wv[r] = in_reg(ld(w + r * ws, i + 32 * j));
        for (int c = 0; c < C; ++c) {
          const __m512bh av = in_reg(ld(p + c * ps, i + 32 * j));
          for (int r = 0; r < R; ++r) acc[r][c][j] = _mm512_dpbf16_ps(acc[r][c][j], wv[r], av);
        }
      }
    }
    for (; i + 32 <= n; i += 32)
      for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r) acc[r][c][0] = _mm512_dpbf16_ps(acc[r][c][0], ld(w + r * ws, i), ld(p + c * ps, i));
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        float sum = hsum512(_mm512_add_ps(acc[r][c][0], acc[r][c][1]));
        for (int64_t k = i; k < n; ++k) sum += bf16_at(w + r * ws, k) * bf16_at(p + c * ps, k);
        y[c * ldy + r] = sum;
      }
  }
};

// ---- 32-element blocks against Q8_0 activations ------------------------------------------------
//
// vec_dot (kernels_avx512.cpp, sum_groups16) walks groups of 16 blocks. For the block pair
// (2j, 2j+1) of a group it forms 16 int32 lanes (each the sum of 4 code products; lanes 0-7 block
// 2j, 8-15 block 2j+1), converts them to float and fuses them with the lanes' scale products
// d_w·d_a into accumulator j % 2; then it adds the two accumulators, sums them horizontally and
// adds the 256-bit kernel's sum over the blocks after the last full group.
// The tiles form the same integer lanes another way: vec_dot biases the weight code by 128 and
// subtracts 128·Σa, the tiles bias the activation (packed once per call) and subtract 128·Σw per
// weight row; both are the exact Σ w·a. The scale product is the same float product.
//
// Packed activation row: the Q8_0 row itself (for the tail blocks), padded to 64 bytes, then per
// block pair of every full group 64 bytes of codes + 128 and 16 floats [d_2j ×8 | d_2j+1 ×8].

constexpr size_t kPairBytes = 128;
inline size_t q8_head(int64_t nb) { return (static_cast<size_t>(nb) * sizeof(block_q8_0) + 63) / 64 * 64; }

size_t q8_packed_size(int64_t n) {
  const int64_t nb = n / QK;
  return q8_head(nb) + static_cast<size_t>(nb / 16) * 8 * kPairBytes;
}

void q8_pack(const void* a, void* packed, int64_t n) {
  const int64_t nb = n / QK;
  const auto* y = static_cast<const block_q8_0*>(a);
  auto* out = static_cast<uint8_t*>(packed);
  std::memcpy(out, a, static_cast<size_t>(nb) * sizeof(block_q8_0));
  out += q8_head(nb);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80)), two = _mm512_set1_epi32(2);
  for (int64_t g = 0; g + 16 <= nb; g += 16) {
    const __m512 da = f16x16(&y[g].d, sizeof(block_q8_0));
    __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int j = 0; j < 8; ++j, out += kPairBytes) {
      _mm512_storeu_si512(out, _mm512_xor_si512(pair256(y[g + 2 * j].qs, y[g + 2 * j + 1].qs), bias));
      _mm512_storeu_ps(out + 64, _mm512_permutexvar_ps(idx, da));
      idx = _mm512_add_epi32(idx, two);
    }
  }
}

struct Q80W {
  using Block = block_q8_0;
  static constexpr GgmlType kType = GgmlType::Q8_0;
  static __m512 scales(const Block* x) { return f16x16(&x->d, sizeof(Block)); }
  static __m512i codes2(const Block* x, __m512i) { return pair256(x[0].qs, x[1].qs); }
  static __m512i table() { return _mm512_setzero_si512(); }
};
// Nibble-coded blocks: the codes of two blocks in element order, mapped through the signed table.
template <class B, GgmlType T>
struct NibbleW {
  using Block = B;
  static constexpr GgmlType kType = T;
  static __m512i codes2(const Block* x, __m512i tbl) {
    __m512i q = _mm512_broadcast_i32x4(load128(x[0].qs));
    q = _mm512_mask_broadcast_i32x4(q, 0xFF00, load128(x[1].qs));
    q = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xFF00FF00u, q, 4), _mm512_set1_epi8(15));
    return _mm512_shuffle_epi8(tbl, q);
  }
};
struct Q40W : NibbleW<block_q4_0, GgmlType::Q4_0> {
  static __m512 scales(const Block* x) { return f16x16(&x->d, sizeof(Block)); }
  static __m512i table() {
    static constexpr int8_t v[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
    return _mm512_broadcast_i32x4(load128(v));
  }
};
struct Iq4nlW : NibbleW<block_iq4_nl, GgmlType::IQ4_NL> {
  static __m512 scales(const Block* x) { return f16x16(&x->d, sizeof(Block)); }
  static __m512i table() { return _mm512_broadcast_i32x4(load128(kvalues_iq4nl)); }
};
struct Mxfp4W : NibbleW<block_mxfp4, GgmlType::MXFP4> {
  static __m512 scales(const Block* x) { return e8m0_half_x16(x); }
  static __m512i table() { return _mm512_broadcast_i32x4(load128(kvalues_mxfp4)); }
};

template <class W>
struct QuantGemm {
  using Block = typename W::Block;
  static constexpr int kRows = 2, kCols = 4;  // 16 accumulator pairs' halves
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* p, size_t ps, float* y, int64_t ldy) {
    const int64_t nb = n / QK;
    const size_t head = q8_head(nb);
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80)), zero = _mm512_setzero_si512();
    const __m512i two = _mm512_set1_epi32(2), tbl = W::table();
    __m512 acc0[R][C], acc1[R][C];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) acc0[r][c] = acc1[r][c] = _mm512_setzero_ps();
    int64_t g = 0;
    for (; g + 16 <= nb; g += 16) {
      const Block* x[R];
      __m512 dw[R];
      for (int r = 0; r < R; ++r) {
        x[r] = reinterpret_cast<const Block*>(w + r * ws) + g;
        dw[r] = W::scales(x[r]);
      }
      const uint8_t* pg = p + head + static_cast<size_t>(g / 2) * kPairBytes;
      __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
      // Block pair j of the group into acc (acc0 for even j, acc1 for odd, as vec_dot).
      auto pair = [&](int j, __m512(&acc)[R][C]) __attribute__((always_inline)) {
        __m512i wv[R], wn[R];
        __m512 pw[R];
        for (int r = 0; r < R; ++r) {
          wv[r] = in_reg(W::codes2(x[r] + 2 * j, tbl));
          wn[r] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, wv[r]));
          pw[r] = _mm512_permutexvar_ps(idx, dw[r]);
        }
        idx = _mm512_add_epi32(idx, two);
        for (int c = 0; c < C; ++c) {
          const uint8_t* q = pg + c * ps + j * kPairBytes;
          const __m512i av = in_reg(load512(q));
          const __m512 da = in_reg(_mm512_loadu_ps(q + 64));
          for (int r = 0; r < R; ++r) {
            const __m512 isum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(wn[r], av, wv[r]));
            acc[r][c] = _mm512_fmadd_ps(isum, _mm512_mul_ps(pw[r], da), acc[r][c]);
          }
        }
      };
      for (int j = 0; j < 8; j += 2) {
        pair(j, acc0);
        pair(j + 1, acc1);
      }
    }
    const auto dot256 = g < nb ? kernels(W::kType, Isa::Avx2).vec_dot : nullptr;
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        float sum = hsum512(_mm512_add_ps(acc0[r][c], acc1[r][c]));
        if (dot256) {
          float rest;
          dot256((nb - g) * QK, &rest, reinterpret_cast<const Block*>(w + r * ws) + g,
                 reinterpret_cast<const block_q8_0*>(p + c * ps) + g);
          sum += rest;
        }
        y[c * ldy + r] = sum;
      }
  }
};

size_t no_pack_size(int64_t) { return 0; }

template <class K>
constexpr GemmKernel unpacked() { return {no_pack_size, nullptr, run_tiles<K>}; }
template <class K>
constexpr GemmKernel packed_q8() { return {q8_packed_size, q8_pack, run_tiles<K>}; }

constexpr GemmKernel kF32 = unpacked<FloatGemm<load16_f32, f32_at>>();
constexpr GemmKernel kF16 = unpacked<FloatGemm<load16_f16, f16_at>>();
constexpr GemmKernel kBf16 = unpacked<Bf16Gemm>();
constexpr GemmKernel kQ80 = packed_q8<QuantGemm<Q80W>>();
constexpr GemmKernel kQ40 = packed_q8<QuantGemm<Q40W>>();
constexpr GemmKernel kIq4nl = packed_q8<QuantGemm<Iq4nlW>>();
constexpr GemmKernel kMxfp4 = packed_q8<QuantGemm<Mxfp4W>>();

}  // namespace

namespace detail {

const GemmKernel* gemm_kernel_avx512(GgmlType t) {
  switch (t) {
    case GgmlType::F32: return &kF32;
    case GgmlType::F16: return &kF16;
    case GgmlType::BF16: return &kBf16;
    case GgmlType::Q8_0: return &kQ80;
    case GgmlType::Q4_0: return &kQ40;
    case GgmlType::IQ4_NL: return &kIq4nl;
    case GgmlType::MXFP4: return &kMxfp4;
    default: return nullptr;
  }
}

}  // namespace detail
}  // namespace k3
