// Per-type kernel table (one entry per computable ggml type) with run-time ISA dispatch.
// Every SIMD kernel has a scalar reference (Isa::Scalar) and tests compare them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <xmmintrin.h>

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
// lines are still there when read (docs/performance.md). Measured (bench_kernels prefetch_ab, each
// pair of settings alternated on the same matvec): on AMD Zen 4 at 1 thread 8 KB ahead read Q8_0
// and BF16 rows 1.2-1.4x as fast as 4 KB and MXFP4 1.1-1.15x, 2 threads within -3..+11 %; L2
// (prefetcht1) on an Intel Xeon read Q8_0 0.87-0.92 of the probe against 0.64-0.78 for L1
// (prefetcht0), on Zen 4 the two levels are within 3 % (docs/benchmarks.md, "Every CPU").
// K3_PREFETCH=LEVEL[:BYTES] (l1|l2, 256-65536 bytes, a multiple of 64) overrides; bits never depend on it.
struct PrefetchSetting {
  bool l2 = true;
  uint32_t bytes = 8192;
  bool operator==(const PrefetchSetting&) const = default;
};
PrefetchSetting prefetch_setting();  // resolved with the CPU's levels, K3_PREFETCH applied
void set_prefetch_setting(PrefetchSetting s);  // between parallel regions only (benchmarks)
// "l2:8192"; parse_prefetch_setting reads that form (or the level alone) and names `what` in its error.
std::string prefetch_setting_name(PrefetchSetting s);
PrefetchSetting parse_prefetch_setting(const char* text, const char* what);
namespace detail {
extern PrefetchSetting g_prefetch;  // set before any kernel is handed out
}
inline size_t prefetch_distance() { return detail::g_prefetch.bytes; }
// Runs f with the hint of the prefetch level as a constant (_mm_prefetch needs one): callers branch
// once per span of lines, not once per line.
template <class F>
inline void with_prefetch_hint(F&& f) {
  if (detail::g_prefetch.l2) f.template operator()<_MM_HINT_T1>();
  else f.template operator()<_MM_HINT_T0>();
}
inline void prefetch_weights(const void* p) {
  with_prefetch_hint([p]<int kHint>() { _mm_prefetch(static_cast<const char*>(p), static_cast<_mm_hint>(kHint)); });
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
