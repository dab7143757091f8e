// Per-type kernel table (one entry per computable ggml type) with run-time ISA dispatch.
// Every SIMD kernel has a scalar reference (Isa::Scalar) and tests compare them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/types.h"

namespace k3 {

// Kernel levels, each a superset of the one before except that AVX-512 does not need AVX-VNNI
// (the VEX encoding of the 256-bit VNNI instructions; AVX-512 has its own): avxvnni is AVX2 plus
// AVX-VNNI, the level of CPUs such as Alder Lake, and on an AVX-512 CPU that lacks AVX-VNNI
// (Ice Lake, Zen 4) a request for it gets avx2.
enum class Isa { Scalar = 0, Avx2 = 1, AvxVnni = 2, Avx512 = 3 };
constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::AvxVnni, Isa::Avx512};
const char* isa_name(Isa isa);
Isa cpu_best_isa();         // what this CPU supports
bool isa_supported(Isa isa);  // whether this CPU runs the level
// The supported level at or below isa.
Isa usable_isa(Isa isa);
// The ISA in use: the best supported, lowered by the environment variable K3_ISA
// (scalar|avx2|avxvnni|avx512) or by set_isa(); never above what the CPU supports.
Isa active_isa();
void set_isa(Isa isa);
// The CPU's vendor string ("AuthenticAMD", "GenuineIntel", ...) and its family and model as
// cpuid leaf 1 gives them with the extended fields folded in (Zen 4: family 0x19, Zen 5: 0x1A).
struct CpuIdent {
  std::string vendor;
  unsigned family = 0, model = 0;
  // the per-CPU tuning choices key on these
  bool intel() const { return vendor == "GenuineIntel"; }
  bool amd() const { return vendor == "AuthenticAMD"; }
};
CpuIdent cpu_ident();
// Whether the CPU runs 512-bit operations at full width: not AMD Zen 4 (family 0x19), which splits
// each in two 256-bit halves. Where a 512-bit form pays only at full width, the AVX-512 table keeps
// the 256-bit one on such a CPU (gemm_avx512.cpp). set_full_width_512: tests and benchmarks (both
// forms on one CPU), between parallel regions.
bool full_width_512();
void set_full_width_512(bool on);
// Whether the decode rows that may run either way run in two parts, two streams a thread: the
// 256-bit Q4_K_LANES rows (AVX2, AVX-VNNI; the 512-bit ones always do), the MXFP4_LANES rows at
// every level, the F16, BF16 and Q6_K rows and the 256-bit F32 and Q5_K rows (their tile over two
// rows, else vec_dot a row), and the Q4_0, IQ4_NL and file-layout MXFP4 rows. On Intel one stream
// reads ~0.8 of a core's probe and two its whole rate (bench_kernels matvec/): m64-q4k decode
// 1.07-1.11x for the Q4_K rows, then 1.02-1.05x for the MXFP4 ones; a Q6_K trunk 1.06-1.10x, Q5_K
// 1.02-1.04x, BF16 1.14-1.25x (docs/notes/i37m.md, i37o.md). Q2_K (and Q2_K_SB), Q3_K and Q5_K:
// at AVX-512 always in parts (like the 512-bit Q4_K_LANES rows); Q2_K and Q3_K at 256 bits vec_dot,
// which their arithmetic bounds and the tile does slower (0.81-0.90x). AMD keeps
// one row a step (Zen 5: Q4_K 0.96x, MXFP4 at 512 bits 1.00-1.02x; docs/notes/i37e.md, i37f.md).
// K3_DECODE_STREAMS=1|2 overrides; set_decode_in_parts: tests and benchmarks, between parallel
// regions.
bool decode_in_parts();
void set_decode_in_parts(bool on);
// How a region's rows are cut (matvec.cpp): about per_thread chunks a thread, each at most max_kib
// KiB of weights (at least 64 KiB). By CPU (default_decode_chunks): Intel 2 of <= 1024, AMD Zen 5
// 1 of <= 4096, other CPUs 4 of <= 512 (docs/notes/i37m.md, i37p.md, i37q.md); K3_DECODE_CHUNKS=
// CLAIMS:KIB sets it (benchmarks; checked with K3_DECODE_STREAMS).
struct DecodeChunks {
  int per_thread;
  size_t max_kib;
};
DecodeChunks decode_chunks();
DecodeChunks default_decode_chunks(const CpuIdent& cpu);
void set_decode_chunks(DecodeChunks rule);  // tests, between parallel regions

struct QuantKernels {
  GgmlType vec_dot_type;  // activation partner format (quant-formats.md §10)
  // Rows of n elements, n a multiple of the block size.
  void (*to_float)(const void* x, float* y, int64_t n);
  // Activation quantizer into this type, as llama.cpp's CPU backend does it (SIMD rounding
  // rules); only set for types that serve as a vec_dot_type (F32, F16, BF16, Q8_0, Q8_1, Q8_K).
  void (*from_float)(const float* x, void* y, int64_t n);
  // s = dot(weight row x of this type, activation row y of vec_dot_type), n elements.
  // Activation codes must lie in [-127, 127], which is what from_float produces; the SIMD
  // kernels rely on it (|code| <= 127 keeps the byte-pair products within int16).
  // Quantized types sum code products per block in integers, then combine them with the float
  // scales as llama.cpp does (K-quants, IQ4_XS: s += (d_a·d_w)·isum − (d_a·dmin_w)·msum per
  // super-block, evaluated identically by every ISA, so those dots are bit-identical across ISAs).
  void (*vec_dot)(int64_t n, float* s, const void* x, const void* y);
  // vec_dot prefetches the weight stream prefetch_distance() ahead of its reads, a few lines per step,
  // so a matvec over consecutive rows needs no prefetch of its own (matmul.cpp).
  bool dot_prefetches = false;
  // F16 only: s = dot(F16 weight row x, unrounded F32 activation y) in the order of llama.cpp's
  // AMX-buffer F16 product (model.md §9): one 16-lane FMA accumulator over n (a multiple of 16),
  // then a halving-tree sum (lanes l + l+8, l + l+4, then (0+2) + (1+3)). Every ISA gives these bits.
  void (*dot_f16_f32_amx)(int64_t n, float* s, const void* x, const float* y) = nullptr;
};

// Weight prefetches: how far ahead of its reads a weight stream is requested and which cache the
// lines go to. Far enough to cover the memory latency at a core's bandwidth, near enough that the
// lines are still there when read (docs/performance.md, "Prefetch"; bench_kernels prefetch_ab
// measures two settings against each other on one CPU). K3_PREFETCH=off|LEVEL[:BYTES][+q8_0] (l1 or
// l2, 256-65536 bytes, a multiple of 64) overrides the CPU's default; bits never depend on it.
// The Q8_0 decode rows (the repacked trunk and the file layout) prefetch only with +q8_0: on AMD they
// do so little arithmetic a byte that the hardware prefetcher keeps ahead of them, and software
// prefetches on top cost the repacked rows 18-32 % at one thread on Zen 4 (docs/performance.md,
// "Prefetch"). Rows with more arithmetic a byte (MXFP4, the K-quants, BF16), cold stream starts and
// the KDA state still gain from them.
enum class PrefetchLevel : uint8_t { Off, L1, L2 };
struct PrefetchSetting {
  PrefetchLevel level = PrefetchLevel::L2;
  uint32_t bytes = 8192;
  bool q8_0 = false;  // the Q8_0 decode rows prefetch too
};
// The default for a CPU: l2:8192 (AMD Zen 4 and Zen 5), l1:2048+q8_0 on Intel, where one core's reads
// are bound by the misses it keeps in flight and lines requested into L1 a short way ahead decode
// m64 1.09-1.15x as fast (docs/performance.md, "Prefetch").
PrefetchSetting default_prefetch_setting(const CpuIdent& cpu);
PrefetchSetting prefetch_setting();  // resolved with the CPU's levels, K3_PREFETCH applied
void set_prefetch_setting(PrefetchSetting s);  // between parallel regions only (benchmarks)
// "l2:8192", "l2:8192+q8_0" or "off"; parse_prefetch_setting reads that form (or a level alone,
// with or without +q8_0, which keeps the distance of `base`) and names `what` in its errors.
std::string prefetch_setting_name(PrefetchSetting s);
PrefetchSetting parse_prefetch_setting(const char* text, const char* what, PrefetchSetting base);
namespace detail {
extern PrefetchSetting g_prefetch;  // set before any kernel is handed out
}
inline size_t prefetch_distance() { return detail::g_prefetch.bytes; }
inline bool prefetch_enabled() { return detail::g_prefetch.level != PrefetchLevel::Off; }
inline bool prefetch_q8_0() { return detail::g_prefetch.q8_0; }
// One line into the level's cache. Inline asm, not _mm_prefetch: GCC 12 at -O3 silently deleted the
// __builtin_prefetch calls of a loop in some function templates (tree DCE; every decode row lost its
// prefetches that way), and nothing but a benchmark would notice.
template <PrefetchLevel L>
inline void prefetch_line(const char* p) {
  if constexpr (L == PrefetchLevel::L2) __asm__ volatile("prefetcht1 %0" : : "m"(*p));
  else if constexpr (L == PrefetchLevel::L1) __asm__ volatile("prefetcht0 %0" : : "m"(*p));
}
// Runs f.template operator()<L>() with the level in force as a constant: callers branch once per
// span of lines, not once per line.
template <class F>
inline void with_prefetch_level(F&& f) {
  switch (detail::g_prefetch.level) {
    case PrefetchLevel::L2: f.template operator()<PrefetchLevel::L2>(); break;
    case PrefetchLevel::L1: f.template operator()<PrefetchLevel::L1>(); break;
    case PrefetchLevel::Off: break;
  }
}
inline void prefetch_weights(const void* p) {
  with_prefetch_level([p]<PrefetchLevel L>() { prefetch_line<L>(static_cast<const char*>(p)); });
}

// Kernels for the active ISA, or for a given one (falls back to the best available below it).
const QuantKernels& kernels(GgmlType t);
const QuantKernels& kernels(GgmlType t, Isa isa);

// Reference quantization, byte-identical to ggml's ggml_quantize_chunk (quant-formats.md §4-§8):
// nrows rows of n_per_row floats; imatrix (n_per_row weights) may be null. Returns bytes written.
size_t quantize_rows(GgmlType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                     const float* imatrix);
// Whether quantize_rows supports the type (and whether it needs an importance matrix).
bool can_quantize(GgmlType t);

}  // namespace k3
