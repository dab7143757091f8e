// Scalar kernels: the reference every SIMD kernel is tested against, and the fallback.
// vec_dot decodes each weight block to integer codes and forms the integer sums llama.cpp's
// integer dot products form (per block, or per sub-block times its integer scale), then combines
// them with the float scales; from_float reproduces ggml-cpu's activation quantizers.
#include <cmath>
#include <cstring>

#include "tensor/blocks.h"
#include "tensor/fp16.h"
#include "tensor/iq3_grids.h"
#include "tensor/iq_grids.h"
#include "tensor/kernels_impl.h"
#include "tensor/quant_ref.h"

namespace k3 {
namespace {

using T = GgmlType;

float h2f(uint16_t h) { return fp16_to_fp32(h); }

int dot32(const int8_t* a, const int8_t* b, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// ---- to_float -------------------------------------------------------------------------------

template <GgmlType t>
void to_float_ref(const void* x, float* y, int64_t n) {
  ref::dequantize_row(t, x, y, n);
}

void to_float_f32(const void* x, float* y, int64_t n) { std::memcpy(y, x, n * sizeof(float)); }
// ---- from_float (activation quantizers) ------------------------------------------------------

void from_float_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, n * sizeof(float)); }
void from_float_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}
void from_float_bf16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint16_t*>(vy);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

// ggml-cpu's SIMD rule: d = amax/127 stored as f16; q = round-half-even(x · (127/amax)).
// Returns Σq for Q8_1.
int quantize_block_q8(const float* x, int8_t* qs, float& d) {
  float amax = 0.0f;
  for (int j = 0; j < QK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  int sum = 0;
  for (int j = 0; j < QK; ++j) {
    qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
    sum += qs[j];
  }
  return sum;
}

void from_float_q8_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_0*>(vy);
  for (int64_t i = 0; i < n / QK; ++i) {
    float d;
    quantize_block_q8(x + i * QK, y[i].qs, d);
    y[i].d = fp32_to_fp16(d);
  }
}

void from_float_q8_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_1*>(vy);
  for (int64_t i = 0; i < n / QK; ++i) {
    float d;
    const int sum = quantize_block_q8(x + i * QK, y[i].qs, d);
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

// quant-formats.md §10; an all-zero block gets zero bsums (ggml leaves them unwritten).
void from_float_q8_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_K*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(block_q8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < QK_K; ++j) {
      const int v = static_cast<int>(std::nearbyint(iscale * x[j]));
      y[i].qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int b = 0; b < QK_K / 16; ++b) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += y[i].qs[16 * b + j];
      y[i].bsums[b] = static_cast<int16_t>(s);
    }
    y[i].d = 1.0f / iscale;
  }
}

// ---- vec_dot: float types --------------------------------------------------------------------

void vec_dot_f32(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const float*>(vx);
  const auto* y = static_cast<const float*>(vy);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * y[i];
  *s = static_cast<float>(sum);
}

template <float (*conv)(uint16_t)>
void vec_dot_half(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const uint16_t*>(vx);
  const auto* y = static_cast<const uint16_t*>(vy);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(conv(x[i]) * conv(y[i]));
  *s = static_cast<float>(sum);
}

// ---- vec_dot: 32-element blocks ---------------------------------------------------------------

// The block terms float(Σ w·a) · (d_w · d_a) of Q4_0, IQ4_NL and MXFP4 are summed in 8
// lanes: lane l takes block 8g + kLaneBlock[l] of each group g of 8 blocks (+0 for the blocks
// a short last group lacks), and the lanes are added as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) +
// (l3 + l7)) (lanes_total: the 256-bit kernels' hsum). It is the order of the 256-bit kernels
// (simd256_block32.inc), which form a group's terms in one vector, so every form gives these bits.
// llama.cpp sums these three types otherwise: its x86 builds repack them (ne1 % 8 == 0) and add one
// FMA per block and output, in block order (docs/model.md, "Parity").
float lanes_total(const float (&acc)[8]) {
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

template <class Term>
float lane_sum(int64_t nb, Term&& term, const int (&order)[8] = kLaneBlock) {
  float acc[8] = {};
  for (int64_t g = 0; g < nb; g += 8)
    for (int l = 0; l < 8; ++l) {
      const int64_t b = g + order[l];
      acc[l] += b < nb ? term(b) : 0.0f;
    }
  return lanes_total(acc);
}

// Q8_0 and Q5_0 sum in llama.cpp's x86 order, the one its dot (vec_dot) and its batch tiles
// (llamafile sgemm) share on AVX2 and AVX-512 builds alike: per block, the 8 sums of 4 consecutive
// products (elements 4l..4l+3 in lane l), each added to its float lane with one FMA, block after
// block: acc_l = fma(d_w·d_a, Σ, acc_l); the lanes are added as lanes_total. With these bits a
// model's activations round to the same Q8 codes as llama.cpp's, which a one-ulp difference in a
// product can flip (docs/model.md, "Parity"). codes(i, c) writes weight block i's 32 codes and
// returns its scale d_w.
template <class Codes>
float elem_lanes(int64_t nb, const block_q8_0* y, Codes&& codes) {
  float acc[8] = {};
  for (int64_t i = 0; i < nb; ++i) {
    int8_t c[QK];
    const float d = codes(i, c) * h2f(y[i].d);
    for (int l = 0; l < 8; ++l) acc[l] = std::fma(d, static_cast<float>(dot32(c + 4 * l, y[i].qs + 4 * l, 4)), acc[l]);
  }
  return lanes_total(acc);
}

// Codes of a 16-byte nibble array: byte j holds element j (low) and j+16 (high).
void unpack_nibbles(const uint8_t* qs, int8_t* c) {
  for (int j = 0; j < 16; ++j) {
    c[j] = static_cast<int8_t>(qs[j] & 15);
    c[j + 16] = static_cast<int8_t>(qs[j] >> 4);
  }
}

void vec_dot_q4_0(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_q4_0*>(vx);
  const auto* y = static_cast<const block_q8_0*>(vy);
  *s = lane_sum(n / QK, [&](int64_t i) {
    int8_t c[QK];
    unpack_nibbles(x[i].qs, c);
    for (int8_t& v : c) v = static_cast<int8_t>(v - 8);
    return static_cast<float>(dot32(c, y[i].qs, QK)) * (h2f(x[i].d) * h2f(y[i].d));
  });
}

void vec_dot_q4_1(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_q4_1*>(vx);
  const auto* y = static_cast<const block_q8_1*>(vy);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / QK; ++i) {
    int8_t c[QK];
    unpack_nibbles(x[i].qs, c);
    sum += static_cast<float>(dot32(c, y[i].qs, QK)) * (h2f(x[i].d) * h2f(y[i].d)) +
           h2f(x[i].m) * h2f(y[i].s);
  }
  *s = sum;
}

void unpack_q5(const uint8_t* qh4, const uint8_t* qs, int8_t* c) {
  uint32_t qh;
  std::memcpy(&qh, qh4, 4);
  unpack_nibbles(qs, c);
  for (int j = 0; j < QK; ++j) c[j] = static_cast<int8_t>(c[j] | (((qh >> j) & 1) << 4));
}

void vec_dot_q5_0(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_q5_0*>(vx);
  *s = elem_lanes(n / QK, static_cast<const block_q8_0*>(vy), [&](int64_t i, int8_t* c) {
    unpack_q5(x[i].qh, x[i].qs, c);
    for (int j = 0; j < QK; ++j) c[j] = static_cast<int8_t>(c[j] - 16);
    return h2f(x[i].d);
  });
}

void vec_dot_q5_1(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_q5_1*>(vx);
  const auto* y = static_cast<const block_q8_1*>(vy);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / QK; ++i) {
    int8_t c[QK];
    unpack_q5(x[i].qh, x[i].qs, c);
    sum += static_cast<float>(dot32(c, y[i].qs, QK)) * (h2f(x[i].d) * h2f(y[i].d)) +
           h2f(x[i].m) * h2f(y[i].s);
  }
  *s = sum;
}

void vec_dot_q8_0(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_q8_0*>(vx);
  *s = elem_lanes(n / QK, static_cast<const block_q8_0*>(vy), [&](int64_t i, int8_t* c) {
    std::memcpy(c, x[i].qs, QK);
    return h2f(x[i].d);
  });
}

// The same blocks as vec_dot_q8_0, grouped by 8 (blocks.h): the same bits.
void vec_dot_q8_0_x8(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_q8_0x8*>(vx);
  *s = elem_lanes(n / QK, static_cast<const block_q8_0*>(vy), [&](int64_t i, int8_t* c) {
    std::memcpy(c, x[i / 8].qs + QK * (i % 8), QK);
    return h2f(x[i / 8].d[i % 8]);
  });
}

void lookup_nibbles(const uint8_t* qs, const int8_t* table, int8_t* c) {
  for (int j = 0; j < 16; ++j) {
    c[j] = table[qs[j] & 15];
    c[j + 16] = table[qs[j] >> 4];
  }
}

// Codes are the doubled E2M1 values, so the scale is half of 2^(e-127).
void vec_dot_mxfp4(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_mxfp4*>(vx);
  const auto* y = static_cast<const block_q8_0*>(vy);
  *s = lane_sum(n / QK, [&](int64_t i) {
    int8_t c[QK];
    lookup_nibbles(x[i].qs, kvalues_mxfp4, c);
    return static_cast<float>(dot32(c, y[i].qs, QK)) * (e8m0_to_fp32_half(x[i].e) * h2f(y[i].d));
  });
}

// The same terms in the same lanes as vec_dot_mxfp4: block i is lane kBlockLane[i % 8] of group i / 8.
void vec_dot_mxfp4_lanes(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_mxfp4x8*>(vx);
  const auto* y = static_cast<const block_q8_0*>(vy);
  *s = lane_sum(n / QK, [&](int64_t i) {
    const block_mxfp4x8& g = x[i / 8];
    const int l = kBlockLane[i % 8];
    int8_t c[QK];
    for (int j = 0; j < QK; ++j) c[j] = kvalues_mxfp4[mxfp4x8_code(g, l, j)];
    return static_cast<float>(dot32(c, y[i].qs, QK)) * (mxfp4x8_half_scale(g, l) * h2f(y[i].d));
  });
}

void vec_dot_iq4_nl(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_iq4_nl*>(vx);
  const auto* y = static_cast<const block_q8_0*>(vy);
  *s = lane_sum(n / QK, [&](int64_t i) {
    int8_t c[QK];
    lookup_nibbles(x[i].qs, kvalues_iq4nl, c);
    return static_cast<float>(dot32(c, y[i].qs, QK)) * (h2f(x[i].d) * h2f(y[i].d));
  });
}

// The 1- and 2-bit types sum like the 32-element blocks: the term of each 32 elements is
// float(Σ code·a) · (d_w · d_a), d_w the scale of the block they lie in (docs/formats.md).
void vec_dot_q1_0(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_q1_0*>(vx);
  const auto* y = static_cast<const block_q8_0*>(vy);
  *s = lane_sum(n / QK, [&](int64_t u) {
    const block_q1_0& b = x[u / 4];
    int sum = 0;
    for (int j = 0; j < QK; ++j) sum += (b.qs[4 * (u % 4) + j / 8] >> (j % 8)) & 1 ? y[u].qs[j] : -y[u].qs[j];
    return static_cast<float>(sum) * (h2f(b.d) * h2f(y[u].d));
  });
}

void vec_dot_q2_0(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_q2_0*>(vx);
  const auto* y = static_cast<const block_q8_0*>(vy);
  *s = lane_sum(n / QK, [&](int64_t u) {
    const block_q2_0& b = x[u / 2];
    int sum = 0;
    for (int j = 0; j < QK; ++j) sum += (q2_0_code(b, QK * (u % 2) + j) - 1) * y[u].qs[j];
    return static_cast<float>(sum) * (h2f(b.d) * h2f(y[u].d));
  });
}

// NVFP4: a term per 16 elements, float(Σ code·a) · (d_sub · d_a) with d_sub = UE4M3 / 2 (the codes
// are doubled E2M1 values). Every two blocks' 8 terms fill the 8 lanes: lane l takes sub-block
// kNvfp4Sub[l] of them (block kNvfp4Sub[l] / 4), the order in which the 256-bit forms' pair halves
// come out of half_sums (simd256_fp4.inc).
constexpr int kNvfp4Sub[8] = {0, 1, 4, 5, 2, 3, 6, 7};
void vec_dot_nvfp4(int64_t n, float* s, const void* vx, const void* vy) {
  const auto* x = static_cast<const block_nvfp4*>(vx);
  const auto* y = static_cast<const block_q8_0*>(vy);
  *s = lane_sum(n / 16, [&](int64_t t) {
    const block_nvfp4& b = x[t / 4];
    const int sub = static_cast<int>(t % 4);
    const int8_t* a = y[t / 2].qs + 16 * (t % 2);
    int sum = 0;
    for (int j = 0; j < 8; ++j)
      sum += kvalues_mxfp4[b.qs[8 * sub + j] & 15] * a[j] + kvalues_mxfp4[b.qs[8 * sub + j] >> 4] * a[j + 8];
    return static_cast<float>(sum) * (ue4m3_to_fp32_half(b.d[sub]) * h2f(y[t / 2].d));
  }, kNvfp4Sub);
}

// ---- vec_dot: 256-element super-blocks with Q8_K ----------------------------------------------

// Each super-block is summed in 8 lanes, as the SIMD forms hold it. Lane l takes the elements e
// with e % 32 in [4l, 4l + 4): isum_l = Σ scale·code·a over them, and msum_l = Σ min·bsum over the
// 16-element sub-blocks 2l and 2l + 1. Codes stored with an offset o (Q3_K: 4, Q6_K: 32) count as
// stored, and isum_l loses o·Σ scale·bsum over sub-blocks 2l and 2l + 1 (the same integer total).
// In floats, per super-block, acc_l = fma(d_a·d_w, isum_l, fma(−d_a·dmin, msum_l, acc_l)), and
// the dot is lanes_total(acc). ggml instead forms each super-block's value
// from its totals; the lanes spare the SIMD forms a horizontal sum per super-block
// (docs/performance.md, "K-quant sums").
struct KqInts {
  int32_t isum[8], msum[8];

  // Zeroes the integer lanes and adds Σ scale[e / sub]·code[e]·a[e] to isum: element e in lane
  // (e % 32) / 4, or in lane e / 32 (its 32-element sub-block) where by_sub.
  void codes(const int8_t* c, const int8_t* a, const int* scale, int sub, bool by_sub) {
    for (int l = 0; l < 8; ++l) isum[l] = msum[l] = 0;
    for (int e = 0; e < QK_K; ++e) isum[by_sub ? e / 32 : (e % 32) / 4] += scale[e / sub] * c[e] * a[e];
  }
  // Per 16-element sub-block j: isum loses off·v[j]·bsums[j] (off != 0; −1 adds), or msum gains v[j]·bsums[j].
  void per_sub(const int* v, const int16_t* bsums, int off) {
    for (int l = 0; l < 8; ++l) {
      const int32_t t = v[2 * l] * bsums[2 * l] + v[2 * l + 1] * bsums[2 * l + 1];
      if (off) isum[l] -= off * t;
      else msum[l] += t;
    }
  }
};
struct KqLanes : KqInts {
  float acc[8] = {};
  void add(float da, float dw, float dmin) {
    for (int l = 0; l < 8; ++l)
      acc[l] = std::fma(da * dw, static_cast<float>(isum[l]), std::fma(-(da * dmin), static_cast<float>(msum[l]), acc[l]));
  }
  float total() const { return lanes_total(acc); }
};
// Q2_K_SB: the order of llama.cpp's repacked Q2_K on its AVX-512 builds as its gemv sums it (every
// decode step, and the n % 4 last tokens of a batch; its gemm, for the 4-token groups, adds each
// 128-element half separately): a super-block's isum and msum added up exactly, one FMA each into
// two float sums, subtracted at the end.
struct KqBlocks : KqInts {
  float sum = 0.0f, mins = 0.0f;
  void add(float da, float dw, float dmin) {
    int32_t is = 0, ms = 0;
    for (int l = 0; l < 8; ++l) is += isum[l], ms += msum[l];
    sum = std::fma(static_cast<float>(is), dw * da, sum);
    mins = std::fma(static_cast<float>(ms), dmin * da, mins);
  }
  float total() const { return sum - mins; }
};

// One weight super-block as KqLanes takes it: codes, a scale per sub elements, the per-sub terms v
// with their offset (KqLanes::per_sub; none where has_v is false), d_w and dmin.
struct KqBlock {
  int8_t c[QK_K];
  int sc[16];
  int sub = 32;
  int v[16] = {};
  int off = 0;
  bool has_v = false;
  bool by_sub = false;  // isum lanes are 32-element sub-blocks (KqInts::codes)
  float dw = 0.0f, dmin = 0.0f;
};

// Every super-block type's dot: decode(x[i], b) fills b, Sum (KqLanes; KqBlocks for Q2_K_SB) does the rest.
template <class Block, class Sum = KqLanes, class Decode>
void kq_dot(int64_t n, float* s, const void* vx, const void* vy, Decode&& decode) {
  const auto* x = static_cast<const Block*>(vx);
  const auto* y = static_cast<const block_q8_K*>(vy);
  Sum k;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    KqBlock b;
    decode(x[i], b);
    k.codes(b.c, y[i].qs, b.sc, b.sub, b.by_sub);
    if (b.has_v) k.per_sub(b.v, y[i].bsums, b.off);
    k.add(y[i].d, b.dw, b.dmin);
  }
  *s = k.total();
}

template <class Sum>
void vec_dot_q2_K(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_q2_K, Sum>(n, s, vx, vy, [](const block_q2_K& x, KqBlock& b) {
    for (int e = 0; e < QK_K; ++e) b.c[e] = static_cast<int8_t>((x.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
    for (int j = 0; j < 16; ++j) b.sc[j] = x.scales[j] & 15, b.v[j] = x.scales[j] >> 4;
    b.sub = 16, b.has_v = true;  // mins
    b.dw = h2f(x.d), b.dmin = h2f(x.dmin);
  });
}

// Codes as stored: q + 4, the hmask bit being bit 2 of the code.
void vec_dot_q3_K(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_q3_K>(n, s, vx, vy, [](const block_q3_K& x, KqBlock& b) {
    for (int e = 0; e < QK_K; ++e) {
      const int q2 = (x.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const int hbit = (x.hmask[e % 32] >> (e / 32)) & 1;
      b.c[e] = static_cast<int8_t>(q2 + 4 * hbit);
    }
    for (int j = 0; j < 16; ++j) {
      const int lo = j < 8 ? x.scales[j] & 15 : x.scales[j - 8] >> 4;
      const int hi = (x.scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      b.sc[j] = b.v[j] = (lo | hi << 4) - 32;
    }
    b.sub = 16, b.off = 4, b.has_v = true;
    b.dw = h2f(x.d);
  });
}

// Q4_K and Q5_K share the scale layout: 8 sub-blocks of 32, so a min covers two bsums.
template <bool kFive, typename Block>
void vec_dot_q45_K(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<Block>(n, s, vx, vy, [](const Block& x, KqBlock& b) {
    for (int p = 0; p < 4; ++p)
      for (int l = 0; l < 32; ++l) {
        int lo = x.qs[32 * p + l] & 15, hi = x.qs[32 * p + l] >> 4;
        if constexpr (kFive) {
          lo |= ((x.qh[l] >> (2 * p)) & 1) << 4;
          hi |= ((x.qh[l] >> (2 * p + 1)) & 1) << 4;
        }
        b.c[64 * p + l] = static_cast<int8_t>(lo);
        b.c[64 * p + 32 + l] = static_cast<int8_t>(hi);
      }
    for (int j = 0; j < 8; ++j) {
      q4k_scale_min(x.scales, j, b.sc[j], b.v[2 * j]);
      b.v[2 * j + 1] = b.v[2 * j];
    }
    b.has_v = true;  // mins
    b.dw = h2f(x.d), b.dmin = h2f(x.dmin);
  });
}

// Q4_K_LANES (blocks.h): the same values as Q4_K, summed with lane l = sub-block l, so that the
// SIMD forms keep a sub-block's sums in one lane (gemm_q4k_lanes.inc); msum lane l is then
// min_l·(bsums[2l] + bsums[2l + 1]) as for Q4_K.
void vec_dot_q4_K_lanes(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_q4_Kl>(n, s, vx, vy, [](const block_q4_Kl& x, KqBlock& b) {
    for (int l = 0; l < 8; ++l) {
      for (int i = 0; i < 32; ++i) b.c[32 * l + i] = static_cast<int8_t>(q4kl_code(x, l, i));
      b.sc[l] = q4kl_scale(x, l);
      b.v[2 * l] = b.v[2 * l + 1] = q4kl_min(x, l);
    }
    b.has_v = b.by_sub = true;
    b.dw = h2f(x.d), b.dmin = h2f(x.dmin);
  });
}

// Codes as stored (q + 32).
void vec_dot_q6_K(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_q6_K>(n, s, vx, vy, [](const block_q6_K& x, KqBlock& b) {
    for (int e = 0; e < QK_K; ++e) {
      const int half = e / 128, g = (e % 128) / 32, l = e % 32;
      const uint8_t lb = x.ql[64 * half + l + 32 * (g & 1)];
      const int low = g < 2 ? lb & 15 : lb >> 4;
      const int high = (x.qh[32 * half + l] >> (2 * g)) & 3;
      b.c[e] = static_cast<int8_t>(low | high << 4);
    }
    for (int j = 0; j < 16; ++j) b.sc[j] = b.v[j] = x.scales[j];
    b.sub = 16, b.off = 32, b.has_v = true;
    b.dw = h2f(x.d);
  });
}

void vec_dot_iq4_xs(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_iq4_xs>(n, s, vx, vy, [](const block_iq4_xs& x, KqBlock& b) {
    for (int j = 0; j < 8; ++j) {
      lookup_nibbles(x.qs + 16 * j, kvalues_iq4nl, b.c + 32 * j);
      const int ls = ((x.scales_l[j / 2] >> (4 * (j % 2))) & 15) | (((x.scales_h >> (2 * j)) & 3) << 4);
      b.sc[j] = ls - 32;
    }
    b.dw = h2f(x.d);
  });
}

// The ternary types: codes stored as value + 1 (offset 1), one scale for the super-block.
template <class Block, int (*code)(const Block&, int)>
void vec_dot_tq(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<Block>(n, s, vx, vy, [](const Block& x, KqBlock& b) {
    for (int e = 0; e < QK_K; ++e) b.c[e] = static_cast<int8_t>(code(x, e));
    for (int j = 0; j < 16; ++j) b.sc[j] = b.v[j] = 1;
    b.sub = 16, b.off = 1, b.has_v = true;
    b.dw = h2f(x.d);
  });
}

// IQ3: signed grid magnitudes times the odd sub-block scale 2s + 1 per 32; IQ3_XXS's values are a
// quarter of that (its super-block scale counts as d/4, exact).
void vec_dot_iq3_xxs(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_iq3_xxs>(n, s, vx, vy, [](const block_iq3_xxs& x, KqBlock& b) {
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t sas;
      std::memcpy(&sas, x.qs + 64 + 4 * ib, 4);
      b.sc[ib] = 2 * static_cast<int>(sas >> 28) + 1;
      for (int e = 0; e < 32; ++e) {
        const uint32_t s7 = (sas >> (7 * (e / 8))) & 127;
        const bool neg = e % 8 == 7 ? __builtin_popcount(s7) & 1 : (s7 >> (e % 8)) & 1;
        const int v = (kIq3xxsGrid[x.qs[8 * ib + e / 4]] >> (8 * (e % 4))) & 255;
        b.c[32 * ib + e] = static_cast<int8_t>(neg ? -v : v);
      }
    }
    b.dw = 0.25f * h2f(x.d);
  });
}

void vec_dot_iq3_s(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_iq3_s>(n, s, vx, vy, [](const block_iq3_s& x, KqBlock& b) {
    for (int ib = 0; ib < 8; ++ib) {
      b.sc[ib] = 1 + 2 * ((x.scales[ib / 2] >> (4 * (ib % 2))) & 15);
      for (int e = 0; e < 32; ++e) {
        const int index = x.qs[8 * ib + e / 4] | ((x.qh[ib] >> (e / 4)) & 1) << 8;
        const int v = (kIq3sGrid[index] >> (8 * (e % 4))) & 255;
        b.c[32 * ib + e] = static_cast<int8_t>((x.signs[4 * ib + e / 8] >> (e % 8)) & 1 ? -v : v);
      }
    }
    b.dw = h2f(x.d);
  });
}

// ---- vec_dot: the lattice types with Q8_K -------------------------------------------------------

// In the K-quant lanes (KqLanes), and 1/8 of Σ (d_a·d_w)·isum as in ggml (the 1/8 goes into d_w:
// exact, d_w being an f16). IQ2 codes are the grid values times their signs. An IQ1 value is
// scale·(8·(level − 1) + shift)/8, shift ±1, and the codes are unsigned, the rest coming from the
// activation's bsums as a K-quant min does (lane l gains Σ v·bsum over sub-blocks 2l, 2l + 1):
// IQ1_S codes are the levels under 8·scale, v = scale·(shift − 8); IQ1_M codes are
// 8·level + shift + 1 under the scale, v = −9·scale. Integer sums throughout, as ggml's.
uint8_t grid_byte(uint64_t g, int j) { return static_cast<uint8_t>(g >> (8 * j)); }

// 8 codes of an IQ2 group: grid entry times the sign bits (bit j set: negative).
void iq2_group(uint64_t grid, uint8_t signs, int8_t* c) {
  for (int j = 0; j < 8; ++j) c[j] = static_cast<int8_t>((signs >> j) & 1 ? -grid_byte(grid, j) : grid_byte(grid, j));
}

// IQ2_XS / IQ2_S: 16 scale nibbles (low first), 2·code + 1 per 16 values.
void nibble_scales(const uint8_t* scales, KqBlock& b) {
  for (int j = 0; j < 16; ++j) b.sc[j] = 2 * ((scales[j / 2] >> (4 * (j % 2))) & 15) + 1;
  b.sub = 16;
}

void vec_dot_iq2_xxs(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_iq2_xxs>(n, s, vx, vy, [](const block_iq2_xxs& x, KqBlock& b) {
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t aux[2];
      std::memcpy(aux, x.qs + 4 * ib, 8);
      for (int g = 0; g < 4; ++g)
        iq2_group(kIqGrids.iq2xxs[(aux[0] >> (8 * g)) & 255], iq::kIqSigns[(aux[1] >> (7 * g)) & 127], b.c + 32 * ib + 8 * g);
      b.sc[ib] = 2 * static_cast<int>(aux[1] >> 28) + 1;
    }
    b.dw = h2f(x.d) * 0.125f;
  });
}

void vec_dot_iq2_xs(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_iq2_xs>(n, s, vx, vy, [](const block_iq2_xs& x, KqBlock& b) {
    for (int g = 0; g < 32; ++g) iq2_group(kIqGrids.iq2xs[x.qs[g] & 511], iq::kIqSigns[x.qs[g] >> 9], b.c + 8 * g);
    nibble_scales(x.scales, b);
    b.dw = h2f(x.d) * 0.125f;
  });
}

void vec_dot_iq2_s(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_iq2_s>(n, s, vx, vy, [](const block_iq2_s& x, KqBlock& b) {
    for (int g = 0; g < 32; ++g) {
      const int idx = x.qs[g] | ((x.qh[g / 4] << (8 - 2 * (g % 4))) & 0x300);
      iq2_group(kIqGrids.iq2s[idx], x.qs[QK_K / 8 + g], b.c + 8 * g);
    }
    nibble_scales(x.scales, b);
    b.dw = h2f(x.d) * 0.125f;
  });
}

// 8 codes of an IQ1 group: mul·level + add.
void iq1_group(uint64_t grid, int mul, int add, int8_t* c) {
  for (int j = 0; j < 8; ++j) c[j] = static_cast<int8_t>(mul * grid_byte(grid, j) + add);
}

// The shift terms: isum gains Σ v·bsum (off −1).
void vec_dot_iq1_s(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_iq1_s>(n, s, vx, vy, [](const block_iq1_s& x, KqBlock& b) {
    for (int ib = 0; ib < 8; ++ib) {
      const uint16_t qh = x.qh[ib];
      for (int g = 0; g < 4; ++g) iq1_group(kIqGrids.iq1s[x.qs[4 * ib + g] | (((qh >> (3 * g)) & 7) << 8)], 1, 0, b.c + 32 * ib + 8 * g);
      const int ls = 2 * ((qh >> 12) & 7) + 1;
      b.sc[ib] = 8 * ls;
      b.v[2 * ib] = b.v[2 * ib + 1] = ls * ((qh & 0x8000 ? -1 : 1) - 8);
    }
    b.off = -1, b.has_v = true;
    b.dw = h2f(x.d) * 0.125f;
  });
}

void vec_dot_iq1_m(int64_t n, float* s, const void* vx, const void* vy) {
  kq_dot<block_iq1_m>(n, s, vx, vy, [](const block_iq1_m& x, KqBlock& b) {
    uint16_t sw[4];
    std::memcpy(sw, x.scales, sizeof sw);
    for (int g = 0; g < 32; ++g) {
      const uint8_t qh = x.qh[g / 2];
      const int hi = g % 2 ? (qh << 4) & 0x700 : (qh << 8) & 0x700;
      iq1_group(kIqGrids.iq1s[x.qs[g] | hi], 8, qh & (g % 2 ? 0x80 : 0x08) ? 0 : 2, b.c + 8 * g);
    }
    for (int j = 0; j < 16; ++j) {
      b.sc[j] = 2 * ((sw[j / 4] >> (3 * (j % 4))) & 7) + 1;
      b.v[j] = -9 * b.sc[j];
    }
    b.sub = 16, b.off = -1, b.has_v = true;
    b.dw = h2f(ref::iq1_m_scale(x)) * 0.125f;
  });
}

void dot_f16_f32_amx(int64_t n, float* s, const void* vx, const float* y) {
  const auto* x = static_cast<const uint16_t*>(vx);
  float acc[16] = {};
  for (int64_t i = 0; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(h2f(x[i + l]), y[i + l], acc[l]);
  for (int w = 8; w >= 4; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  *s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
}

}  // namespace

namespace detail {

void register_scalar_kernels(KernelTable& t) {
  auto set = [&](T type, T vdt, void (*to)(const void*, float*, int64_t),
                 void (*dot)(int64_t, float*, const void*, const void*)) {
    t[static_cast<int>(type)] = QuantKernels{vdt, to, nullptr, dot, false};
  };
  set(T::F32, T::F32, to_float_f32, vec_dot_f32);
  set(T::F16, T::F16, to_float_ref<T::F16>, vec_dot_half<fp16_to_fp32>);
  set(T::BF16, T::BF16, to_float_ref<T::BF16>, vec_dot_half<bf16_to_fp32>);
  set(T::Q4_0, T::Q8_0, to_float_ref<T::Q4_0>, vec_dot_q4_0);
  set(T::Q4_1, T::Q8_1, to_float_ref<T::Q4_1>, vec_dot_q4_1);
  set(T::Q5_0, T::Q8_0, to_float_ref<T::Q5_0>, vec_dot_q5_0);
  set(T::Q5_1, T::Q8_1, to_float_ref<T::Q5_1>, vec_dot_q5_1);
  set(T::Q8_0, T::Q8_0, to_float_ref<T::Q8_0>, vec_dot_q8_0);
  set(T::Q8_0_X8, T::Q8_0, to_float_ref<T::Q8_0_X8>, vec_dot_q8_0_x8);
  set(T::Q8_1, T::Q8_1, to_float_ref<T::Q8_1>, nullptr);
  set(T::Q2_K, T::Q8_K, to_float_ref<T::Q2_K>, vec_dot_q2_K<KqLanes>);
  set(T::Q2_K_SB, T::Q8_K, to_float_ref<T::Q2_K_SB>, vec_dot_q2_K<KqBlocks>);
  set(T::Q3_K, T::Q8_K, to_float_ref<T::Q3_K>, vec_dot_q3_K);
  set(T::Q4_K, T::Q8_K, to_float_ref<T::Q4_K>, vec_dot_q45_K<false, block_q4_K>);
  set(T::Q4_K_LANES, T::Q8_K, to_float_ref<T::Q4_K_LANES>, vec_dot_q4_K_lanes);
  set(T::Q5_K, T::Q8_K, to_float_ref<T::Q5_K>, vec_dot_q45_K<true, block_q5_K>);
  set(T::Q6_K, T::Q8_K, to_float_ref<T::Q6_K>, vec_dot_q6_K);
  set(T::Q8_K, T::Q8_K, to_float_ref<T::Q8_K>, nullptr);
  set(T::MXFP4, T::Q8_0, to_float_ref<T::MXFP4>, vec_dot_mxfp4);
  set(T::MXFP4_LANES, T::Q8_0, to_float_ref<T::MXFP4_LANES>, vec_dot_mxfp4_lanes);
  set(T::IQ4_NL, T::Q8_0, to_float_ref<T::IQ4_NL>, vec_dot_iq4_nl);
  set(T::IQ4_XS, T::Q8_K, to_float_ref<T::IQ4_XS>, vec_dot_iq4_xs);
  set(T::IQ2_XXS, T::Q8_K, to_float_ref<T::IQ2_XXS>, vec_dot_iq2_xxs);
  set(T::IQ2_XS, T::Q8_K, to_float_ref<T::IQ2_XS>, vec_dot_iq2_xs);
  set(T::IQ2_S, T::Q8_K, to_float_ref<T::IQ2_S>, vec_dot_iq2_s);
  set(T::IQ1_S, T::Q8_K, to_float_ref<T::IQ1_S>, vec_dot_iq1_s);
  set(T::IQ1_M, T::Q8_K, to_float_ref<T::IQ1_M>, vec_dot_iq1_m);
  set(T::Q1_0, T::Q8_0, to_float_ref<T::Q1_0>, vec_dot_q1_0);
  set(T::Q2_0, T::Q8_0, to_float_ref<T::Q2_0>, vec_dot_q2_0);
  set(T::NVFP4, T::Q8_0, to_float_ref<T::NVFP4>, vec_dot_nvfp4);
  set(T::TQ1_0, T::Q8_K, to_float_ref<T::TQ1_0>, vec_dot_tq<block_tq1_0, tq1_0_code>);
  set(T::TQ2_0, T::Q8_K, to_float_ref<T::TQ2_0>, vec_dot_tq<block_tq2_0, tq2_0_code>);
  set(T::IQ3_XXS, T::Q8_K, to_float_ref<T::IQ3_XXS>, vec_dot_iq3_xxs);
  set(T::IQ3_S, T::Q8_K, to_float_ref<T::IQ3_S>, vec_dot_iq3_s);
  t[static_cast<int>(T::F32)].from_float = from_float_f32;
  t[static_cast<int>(T::F16)].from_float = from_float_f16;
  t[static_cast<int>(T::BF16)].from_float = from_float_bf16;
  t[static_cast<int>(T::Q8_0)].from_float = from_float_q8_0;
  t[static_cast<int>(T::Q8_1)].from_float = from_float_q8_1;
  t[static_cast<int>(T::Q8_K)].from_float = from_float_q8_K;
  t[static_cast<int>(T::F16)].dot_f16_f32_amx = dot_f16_f32_amx;
}

}  // namespace detail
}  // namespace k3
