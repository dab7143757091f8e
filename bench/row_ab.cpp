// Decode-row A/B: the decode rows of two source trees, the 32-element block ones (gemm_block32.inc,
// gemm_elem.inc) and the repacked layouts' (gemm_lanes.inc, gemm_elem.inc: what the model runs after
// repacking), compiled into one binary and timed call by call (one row: the 1 x 1 tile; MXFP4
// lanes: the decode entry over 8 rows, as matvec calls it), alternating in batches of 20 calls,
// for MXFP4 and Q8_0 at 1024 and 7168 inputs; the Q4_K_LANES decode rows (gemm_q4k_lanes.inc,
// whole calls of 16 rows of 2048 or 4 of 7168); and the K-quant vec_dots (Q4_K, Q2_K, Q6_K at
// 2048 and 7168, bench/row_ab_kq.cpp). On a shared host the absolute rate of a kernel moves by 15-30 % from one
// minute to the next while the ratio of two kernels timed this way repeats within about 2 % from
// run to run, so a kernel change is judged by the ratio (docs/performance.md, "Measuring"). A second
// copy of A (A') is the control: identical code placed elsewhere in the binary reads up to 7 %
// apart on Zen 4 (loop alignment), so a change counts only where A/B is further from 1 than A/A'.
// Built and run by bench/row_ab (once a kernel level: the flags and K3_AVX512 select the forms),
// which sets K3_AB_A / K3_AB_B to the two trees' src directories; the quantizer and the headers the
// .inc files need come from the working tree. Both trees must give the same bits.
#include <immintrin.h>
#include <x86intrin.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "tensor/blocks.h"
#include "tensor/gemm.h"
#include "tensor/ggml_order.h"
#include "tensor/kernels.h"
#include "tensor/repack.h"

#define K3_STR(x) #x
#define K3_PATH(dir, file) K3_STR(dir/tensor/file)

namespace k3 {
#ifdef K3_AVX512
// For older trees whose simd256_common.inc lacks them (load512 came with 017673d, join256 and
// pair256 after 5608f24): gemm_lanes.inc, gemm_q4k_lanes.inc and gemm_elem.inc use them.
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
inline __m512i join256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
inline __m512i pair256(const void* lo, const void* hi) {
  return join256(_mm256_loadu_si256(static_cast<const __m256i*>(lo)), _mm256_loadu_si256(static_cast<const __m256i*>(hi)));
}
#endif
namespace va {
#include K3_PATH(K3_AB_A, simd256_common.inc)
#include K3_PATH(K3_AB_A, gemm_tiles.inc)
#include K3_PATH(K3_AB_A, simd256_block32.inc)
#include K3_PATH(K3_AB_A, gemm_block32.inc)
#include K3_PATH(K3_AB_A, gemm_lanes.inc)
#include K3_PATH(K3_AB_A, gemm_q4k_lanes.inc)
#include K3_PATH(K3_AB_A, simd256_elem.inc)
#include K3_PATH(K3_AB_A, gemm_elem.inc)
}  // namespace va
namespace vb {
#include K3_PATH(K3_AB_B, simd256_common.inc)
#include K3_PATH(K3_AB_B, gemm_tiles.inc)
#include K3_PATH(K3_AB_B, simd256_block32.inc)
#include K3_PATH(K3_AB_B, gemm_block32.inc)
#include K3_PATH(K3_AB_B, gemm_lanes.inc)
#include K3_PATH(K3_AB_B, gemm_q4k_lanes.inc)
#include K3_PATH(K3_AB_B, simd256_elem.inc)
#include K3_PATH(K3_AB_B, gemm_elem.inc)
}  // namespace vb
namespace vc {  // A again: the control, what code placement alone moves
#include K3_PATH(K3_AB_A, simd256_common.inc)
#include K3_PATH(K3_AB_A, gemm_tiles.inc)
#include K3_PATH(K3_AB_A, simd256_block32.inc)
#include K3_PATH(K3_AB_A, gemm_block32.inc)
#include K3_PATH(K3_AB_A, gemm_lanes.inc)
#include K3_PATH(K3_AB_A, gemm_q4k_lanes.inc)
#include K3_PATH(K3_AB_A, simd256_elem.inc)
#include K3_PATH(K3_AB_A, gemm_elem.inc)
}  // namespace vc
}  // namespace k3

namespace {
using namespace k3;

// One decode row: the 1 x 1 tile, which both trees have (the decode entry's name has changed).
template <class K>
void row(int64_t n, const uint8_t* w, const uint8_t* p, float* y) {
  K::template tile<1, 1>(n, w, 0, p, 0, y, 0);
}

// Rounds of 20 rows of A, then 20 of B (each a call f(n, w, activation, &y)): the fastest batch of
// each and the median per-round ratio.
template <class FA, class FB>
bool compare(const char* type, const char* pair, int64_t n, const uint8_t* w, const uint8_t* pa, const uint8_t* pb,
             FA&& fa, FB&& fb) {
  float ya, yb;
  fa(n, w, pa, &ya);
  fb(n, w, pb, &yb);
  if (std::memcmp(&ya, &yb, sizeof(float)) != 0) {
    std::printf("%s n=%ld: the trees give different bits (%.9g vs %.9g)\n", type, static_cast<long>(n), ya, yb);
    return false;
  }
  constexpr int kBatch = 20, kRounds = 3000;
  std::vector<double> ratio;
  uint64_t best_a = ~0ull, best_b = ~0ull;
  volatile float sink = 0;
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t t0 = __rdtsc();
    for (int i = 0; i < kBatch; ++i) {
      fa(n, w, pa, &ya);
      sink = ya;
    }
    const uint64_t t1 = __rdtsc();
    for (int i = 0; i < kBatch; ++i) {
      fb(n, w, pb, &yb);
      sink = yb;
    }
    const uint64_t t2 = __rdtsc();
    best_a = std::min(best_a, t1 - t0), best_b = std::min(best_b, t2 - t1);
    ratio.push_back(static_cast<double>(t1 - t0) / static_cast<double>(t2 - t1));
  }
  std::sort(ratio.begin(), ratio.end());
  std::printf("%-7s n=%5ld %-4s %7.1f / %7.1f TSC ticks a row, ratio best %.3f, median %.3f\n", type, static_cast<long>(n), pair,
              static_cast<double>(best_a) / kBatch, static_cast<double>(best_b) / kBatch,
              static_cast<double>(best_a) / static_cast<double>(best_b), ratio[ratio.size() / 2]);
  return true;
}

// A random weight row of type t and a random activation row of type at, n values each.
struct RowPair {
  std::vector<uint8_t> w, a;
};
RowPair random_pair(std::mt19937& rng, GgmlType t, GgmlType at, int64_t n) {
  std::normal_distribution<float> nd;
  std::vector<float> f(n), x(n);
  for (float& v : f) v = nd(rng) * 0.05f;
  for (float& v : x) v = nd(rng);
  RowPair p{std::vector<uint8_t>(row_size(t, n)), std::vector<uint8_t>(row_size(at, n))};
  quantize_rows(t, f.data(), p.w.data(), 1, n, nullptr);
  kernels(at, Isa::Scalar).from_float(x.data(), p.a.data(), n);
  return p;
}

// The MXFP4 lane layout's decode entry (one row a step: K3_AB_LANES) over 8 copies of a
// row a call.
bool run_lanes(const GemmKernel& ka, const GemmKernel& kb, const GemmKernel& kc) {
  bool ok = true;
  std::mt19937 rng(1);
  auto entry = [](const GemmKernel& k, size_t rs) {
    return [&k, rs](int64_t n, const uint8_t* w, const uint8_t* p, float* y) {
      float out[8];
      k.rows(n, w, rs, 8, p, out);
      *y = out[7];
    };
  };
  for (int64_t n : {1024, 7168}) {
    RowPair r = random_pair(rng, GgmlType::MXFP4, GgmlType::Q8_0, n);
    const size_t rs = row_size(GgmlType::MXFP4_LANES, n);
    repack_rows(GgmlType::MXFP4, r.w.data(), 1, n, rs);
    std::vector<uint8_t> w8;
    for (int i = 0; i < 8; ++i) w8.insert(w8.end(), r.w.begin(), r.w.begin() + rs);
    alignas(64) static uint8_t pa[1 << 16], pb[1 << 16];
    ka.pack(r.a.data(), pa, n);
    kb.pack(r.a.data(), pb, n);
    ok = compare("mxfp4x8", "A/B", n, w8.data(), pa, pb, entry(ka, rs), entry(kb, rs)) && ok;
    ok = compare("mxfp4x8", "A/A'", n, w8.data(), pa, pa, entry(ka, rs), entry(kc, rs)) && ok;
  }
  return ok;
}

// One weight type's rows in va, vb and vc (TA, TB, TC: its tile in each tree) against the
// activation packed by each tree (pack_a, pack_b): the file type's row, repacked where the tiles
// read a lane layout (tensor/repack.h).
using PackFn = void (*)(const void*, void*, int64_t);
template <class TA, class TB, class TC>
bool run(GgmlType file, GgmlType stored, const char* type, PackFn pack_a, PackFn pack_b) {
  bool ok = true;
  std::mt19937 rng(1);
  for (int64_t n : {1024, 7168}) {
    RowPair r = random_pair(rng, file, GgmlType::Q8_0, n);
    if (stored != file) repack_rows(file, r.w.data(), 1, n, row_size(stored, n));
    alignas(64) static uint8_t pa[1 << 16], pb[1 << 16];
    pack_a(r.a.data(), pa, n);
    pack_b(r.a.data(), pb, n);
    ok = compare(type, "A/B", n, r.w.data(), pa, pb, row<TA>, row<TB>) && ok;
    ok = compare(type, "A/A'", n, r.w.data(), pa, pa, row<TA>, row<TC>) && ok;
  }
  return ok;
}

// Q4_K_LANES decode rows as matvec calls them (GemmKernel::rows over a chunk of rows, here 16
// rows of 2048 (m64's trunk) and 4 of 7168, in L1/L2): KA, KB, KC the kernels of va, vb and vc
// (gemm_q4k_lanes.inc) against the activation each tree packs; the ticks printed are a call's.
template <const GemmKernel& KA, const GemmKernel& KB, const GemmKernel& KC>
bool run_q4kl() {
  bool ok = true;
  std::mt19937 rng(1);
  for (int64_t n : {2048, 7168}) {
    const int64_t nr = n == 2048 ? 16 : 4, ws = static_cast<int64_t>(row_size(GgmlType::Q4_K, n));
    std::vector<uint8_t> w;
    RowPair r;
    for (int64_t i = 0; i < nr; ++i) {
      r = random_pair(rng, GgmlType::Q4_K, GgmlType::Q8_K, n);
      w.insert(w.end(), r.w.begin(), r.w.end());
    }
    repack_rows(GgmlType::Q4_K, w.data(), nr, n, ws);
    alignas(64) static uint8_t pa[1 << 16], pb[1 << 16];
    KA.pack(r.a.data(), pa, n);
    KB.pack(r.a.data(), pb, n);
    auto rows = [nr, ws](const GemmKernel& k, float* ys) {
      return [&k, nr, ws, ys](int64_t n, const uint8_t* w, const uint8_t* p, float* y) {
        k.rows(n, w, ws, nr, p, ys);
        *y = ys[nr - 1];
      };
    };
    static float ya[16], yb[16];
    rows(KA, ya)(n, w.data(), pa, ya);
    rows(KB, yb)(n, w.data(), pb, yb);
    if (std::memcmp(ya, yb, nr * sizeof(float)) != 0) {
      std::printf("q4_Kl n=%ld: the trees give different bits\n", static_cast<long>(n));
      return false;
    }
    ok = compare("q4_Kl", "A/B", n, w.data(), pa, pb, rows(KA, ya), rows(KB, yb)) && ok;
    ok = compare("q4_Kl", "A/A'", n, w.data(), pa, pa, rows(KA, ya), rows(KC, yb)) && ok;
  }
  return ok;
}

// One K-quant type's vec_dot in va, vb and vc (bench/row_ab_kq.cpp) against a Q8_K activation.
using DotFn = void (*)(int64_t, float*, const void*, const void*);
bool run_kq(GgmlType t, const char* type, DotFn da, DotFn db, DotFn dc) {
  bool ok = true;
  std::mt19937 rng(1);
  auto call = [](DotFn d) { return [d](int64_t n, const uint8_t* w, const uint8_t* p, float* y) { d(n, y, w, p); }; };
  for (int64_t n : {2048, 7168}) {
    const RowPair r = random_pair(rng, t, GgmlType::Q8_K, n);
    ok = compare(type, "A/B", n, r.w.data(), r.a.data(), r.a.data(), call(da), call(db)) && ok;
    ok = compare(type, "A/A'", n, r.w.data(), r.a.data(), r.a.data(), call(da), call(dc)) && ok;
  }
  return ok;
}
}  // namespace

namespace k3 {
#define K3_AB_DOTS(ns)                                          \
  namespace ns {                                                \
  void q4_K(int64_t n, float* s, const void* x, const void* y); \
  void q2_K(int64_t n, float* s, const void* x, const void* y); \
  void q6_K(int64_t n, float* s, const void* x, const void* y); \
  }
K3_AB_DOTS(va)
K3_AB_DOTS(vb)
K3_AB_DOTS(vc)
}  // namespace k3

// The decode entries, one row a step, from names both trees have (the kernel tables' factories
// change shape from one revision to the next).
#ifdef K3_AVX512
#define K3_AB_LANES(ns) {ns::lanes_packed_size, ns::lanes_pack, nullptr, ns::decode_rows<ns::LanesTile512<ns::Mxfp4LanesW, true>>}
#else
#define K3_AB_LANES(ns) {ns::lanes_packed_size, ns::lanes_pack, nullptr, ns::decode_rows<ns::LanesTile<ns::Mxfp4LanesW>>}
#endif
#define K3_AB_Q4KL(ns) {ns::q4kl_packed_size, ns::q4kl_pack, nullptr, ns::decode_rows<ns::Q4KlRows<ns::Q4KlW, ns::Q4KlDot>>}
namespace {
constexpr k3::GemmKernel kQ4KlA = K3_AB_Q4KL(k3::va), kQ4KlB = K3_AB_Q4KL(k3::vb), kQ4KlC = K3_AB_Q4KL(k3::vc);
}  // namespace

int main() {
  using T = GgmlType;
  bool ok = run<va::Block32Tile<va::Mxfp4B>, vb::Block32Tile<vb::Mxfp4B>, vc::Block32Tile<vc::Mxfp4B>>(
      T::MXFP4, T::MXFP4, "mxfp4", va::b32_pack, vb::b32_pack);
  ok = run<va::ElemTile<va::Q80E>, vb::ElemTile<vb::Q80E>, vc::ElemTile<vc::Q80E>>(
           T::Q8_0, T::Q8_0, "q8_0", va::elem_pack<va::Q80E::kBias>, vb::elem_pack<vb::Q80E::kBias>) && ok;
  static constexpr GemmKernel la = K3_AB_LANES(va), lb = K3_AB_LANES(vb), lc = K3_AB_LANES(vc);
  ok = run_lanes(la, lb, lc) && ok;
  ok = run<va::ElemTile<va::Q80X8E>, vb::ElemTile<vb::Q80X8E>, vc::ElemTile<vc::Q80X8E>>(
           T::Q8_0, T::Q8_0_X8, "q8_0x8", va::elem_pack<va::Q80E::kBias>, vb::elem_pack<vb::Q80E::kBias>) && ok;
  ok = run_q4kl<kQ4KlA, kQ4KlB, kQ4KlC>() && ok;
  ok = run_kq(T::Q4_K, "q4_K", va::q4_K, vb::q4_K, vc::q4_K) && ok;
  ok = run_kq(T::Q2_K, "q2_K", va::q2_K, vb::q2_K, vc::q2_K) && ok;
  ok = run_kq(T::Q6_K, "q6_K", va::q6_K, vb::q6_K, vc::q6_K) && ok;
  return ok ? 0 : 1;
}
