// Vector pipes: the throughput of the 256-bit instructions the decode rows are made of, alone and
// two kinds interleaved, in core cycles an instruction. Eight independent chains per kind keep
// latency out of it; a dependent scalar add loop gives the core clock (one add a cycle), so the
// figures do not depend on the TSC rate or turbo. Two kinds that share pipes read as the slower
// alone; two that issue on different pipes read as about half of that. This is what told, on Zen 5,
// that hadd costs 2 cycles and that shuffles, multiplies, shifts and float ops share two pipes
// while logic and unpacks issue beside them (docs/performance.md, "Horizontal sums").
//
//   build/bin/bench_vector_pipes   (compiled with -mavx2 whatever the build's flags; needs AVX2)
#include <immintrin.h>
#include <x86intrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

namespace {

enum Op { kShufb, kMaddubs, kMaddwd, kSrlw, kHaddd, kUnpack, kInsert, kAnd, kAddw, kMulps, kAddps, kCvt, kBlendv,
          kBlendd, kPerm2, kSign, kAbs, kCount };
const char* const kName[kCount] = {"pshufb", "pmaddubsw", "pmaddwd", "psrlw",    "phaddd",     "punpckldq",
                                   "vinserti128", "pand", "paddw",   "mulps",    "addps",      "cvtdq2ps",
                                   "pblendvb", "pblendd", "vperm2i128", "psignb", "pabsb"};

template <int K>
inline __m256i op(__m256i a, __m256i t) {
  if constexpr (K == kShufb) return _mm256_shuffle_epi8(t, a);
  if constexpr (K == kMaddubs) return _mm256_maddubs_epi16(a, t);
  if constexpr (K == kMaddwd) return _mm256_madd_epi16(a, t);
  if constexpr (K == kSrlw) return _mm256_srli_epi16(a, 1);
  if constexpr (K == kHaddd) return _mm256_hadd_epi32(a, t);
  if constexpr (K == kUnpack) return _mm256_unpacklo_epi32(a, t);
  if constexpr (K == kInsert) return _mm256_inserti128_si256(a, _mm256_castsi256_si128(t), 1);
  if constexpr (K == kAnd) return _mm256_and_si256(a, t);
  if constexpr (K == kAddw) return _mm256_add_epi16(a, t);
  if constexpr (K == kMulps) return _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(t)));
  if constexpr (K == kAddps) return _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(t)));
  if constexpr (K == kCvt) return _mm256_castps_si256(_mm256_cvtepi32_ps(a));
  if constexpr (K == kBlendv) return _mm256_blendv_epi8(a, t, a);
  if constexpr (K == kBlendd) return _mm256_blend_epi32(a, t, 0xF0);
  if constexpr (K == kPerm2) return _mm256_permute2x128_si256(a, t, 0x21);
  if constexpr (K == kSign) return _mm256_sign_epi8(a, t);
  if constexpr (K == kAbs) return _mm256_abs_epi8(_mm256_xor_si256(a, t));
  return a;
}

// Seconds for n rounds of 16 instructions, kinds A and B alternating over 8 chains.
template <int A, int B>
double time_ops(long n) {
  __m256i c0 = _mm256_set1_epi8(1), c1 = _mm256_set1_epi8(2), c2 = _mm256_set1_epi8(3), c3 = _mm256_set1_epi8(4);
  __m256i c4 = _mm256_set1_epi8(5), c5 = _mm256_set1_epi8(6), c6 = _mm256_set1_epi8(7), c7 = _mm256_set1_epi8(8);
  const __m256i t = _mm256_set1_epi8(3);
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    for (int k = 0; k < 2; ++k) {
      c0 = op<A>(c0, t), c1 = op<B>(c1, t), c2 = op<A>(c2, t), c3 = op<B>(c3, t);
      c4 = op<A>(c4, t), c5 = op<B>(c5, t), c6 = op<A>(c6, t), c7 = op<B>(c7, t);
      // opaque to the optimiser, so that a repeated and/add is not folded into one
      __asm__ volatile("" : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6), "+x"(c7));
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Core cycles a second: a chain of dependent adds runs at one a cycle.
double core_hz() {
  const long n = 400'000'000;
  const auto t0 = std::chrono::steady_clock::now();
  __asm__ volatile(
      "mov %0, %%rcx\n1:\n add $1, %%rax\n add $1, %%rax\n add $1, %%rax\n add $1, %%rax\n sub $4, %%rcx\n jnz 1b\n" ::"r"(n)
      : "rax", "rcx", "cc");
  return static_cast<double>(n) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

template <int A, int B>
double cycles(double hz) {
  constexpr long n = 4'000'000;
  double best = 1e30;
  for (int r = 0; r < 5; ++r) best = std::min(best, time_ops<A, B>(n));
  return best * hz / (16.0 * n);
}

template <int A, int B>
void pair(double hz) {
  std::printf("%-12s + %-12s %6.3f\n", kName[A], kName[B], cycles<A, B>(hz));
}

template <int... K>
void singles(double hz, std::integer_sequence<int, K...>) {
  ((std::printf("%-27s %6.3f\n", kName[K], cycles<K, K>(hz))), ...);
}

}  // namespace

int main() {
  if (!__builtin_cpu_supports("avx2")) {
    std::fprintf(stderr, "bench_vector_pipes: this CPU has no AVX2\n");
    return 1;
  }
  const double hz = core_hz();
  std::printf("core clock %.2f GHz (dependent adds); core cycles an instruction, 8 chains:\n", hz / 1e9);
  singles(hz, std::make_integer_sequence<int, kCount>{});
  std::printf("interleaved (sharing pipes: as the slower alone; disjoint: about half):\n");
  pair<kShufb, kMaddubs>(hz);
  pair<kShufb, kSrlw>(hz);
  pair<kShufb, kMulps>(hz);
  pair<kShufb, kAddps>(hz);
  pair<kShufb, kAnd>(hz);
  pair<kShufb, kUnpack>(hz);
  pair<kShufb, kInsert>(hz);
  pair<kMaddubs, kAddw>(hz);
  pair<kMaddubs, kCvt>(hz);
  pair<kShufb, kBlendd>(hz);
  pair<kMaddubs, kBlendd>(hz);
  pair<kShufb, kPerm2>(hz);
  pair<kMaddubs, kSign>(hz);
  pair<kShufb, kSign>(hz);
  return 0;
}
