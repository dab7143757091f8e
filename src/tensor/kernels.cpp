// Run-time ISA selection and the per-ISA kernel tables.
#include "tensor/kernels.h"

#include <cpuid.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

#include "common/error.h"
#include "tensor/kernels_impl.h"
#include "tensor/quant_ref.h"

namespace k3 {

namespace {

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

bool bit(uint32_t r, int b) { return (r >> b) & 1; }

// The AVX2 files are compiled with AVX2+FMA+F16C+BMI2, the AVX-VNNI files additionally with
// AVX-VNNI, the AVX-512 files with AVX-512 F/BW/DQ/VL/VNNI/BF16 on top of AVX2; each level needs all
// of them and the OS saving the registers. Bit i of the result: level i is supported.
unsigned detect_isas() {
  uint32_t a, b, c, d;
  unsigned levels = 1u << static_cast<int>(Isa::Scalar);
  if (!__get_cpuid(1, &a, &b, &c, &d)) return levels;
  const bool osxsave = bit(c, 27), avx = bit(c, 28), fma = bit(c, 12), f16c = bit(c, 29);
  if (!osxsave || !avx) return levels;
  const uint64_t xcr0 = xgetbv0();
  if ((xcr0 & 0x6) != 0x6) return levels;  // XMM and YMM state
  uint32_t b7 = 0, c7 = 0, d7 = 0, a71 = 0;
  if (!__get_cpuid_count(7, 0, &a, &b7, &c7, &d7)) return levels;
  uint32_t unused;
  if (a >= 1) __get_cpuid_count(7, 1, &a71, &unused, &unused, &unused);
  const bool avx2 = bit(b7, 5), bmi2 = bit(b7, 8);
  if (!(avx2 && fma && f16c && bmi2)) return levels;
  levels |= 1u << static_cast<int>(Isa::Avx2);
  if (bit(a71, 4)) levels |= 1u << static_cast<int>(Isa::AvxVnni);
  const bool zmm_state = (xcr0 & 0xE0) == 0xE0;  // opmask, ZMM0-15 upper halves, ZMM16-31
  const bool avx512 = bit(b7, 16) && bit(b7, 17) && bit(b7, 30) && bit(b7, 31) &&  // F DQ BW VL
                      bit(c7, 11) && bit(a71, 5);                                   // VNNI BF16
  if (zmm_state && avx512) levels |= 1u << static_cast<int>(Isa::Avx512);
  return levels;
}

bool detect_full_width_512() {
  const CpuIdent id = cpu_ident();
  return !(id.amd() && id.family == 0x19);
}

std::atomic<int> g_decode_parts{-1};  // -1: not yet chosen
DecodeChunks g_decode_chunks;

DecodeChunks parse_decode_chunks(const char* v) {
  int claims = 0, kib = 0, used = 0;
  if (std::sscanf(v, "%d:%d%n", &claims, &kib, &used) != 2 || v[used] || claims < 1 || claims > 64 || kib < 64 ||
      kib > 65536)
    fail("K3_DECODE_CHUNKS=%s: expected CLAIMS:KIB, 1-64 claims a thread of at most 64-65536 KiB", v);
  return {claims, static_cast<size_t>(kib)};
}

// The CPU's levels, found once; the prefetch setting and the decode rows' streams are chosen with them,
// before any kernel is handed out.
unsigned supported_levels() {
  static const unsigned levels = [] {
    const CpuIdent cpu = cpu_ident();
    detail::g_prefetch = default_prefetch_setting(cpu);
    if (const char* v = std::getenv("K3_PREFETCH"); v && *v)
      detail::g_prefetch = parse_prefetch_setting(v, "K3_PREFETCH", detail::g_prefetch);
    const char* streams = std::getenv("K3_DECODE_STREAMS");
    if (streams && *streams && std::strcmp(streams, "1") && std::strcmp(streams, "2"))
      fail("K3_DECODE_STREAMS=%s: expected 1 or 2", streams);
    const char* chunks = std::getenv("K3_DECODE_CHUNKS");
    g_decode_chunks = chunks && *chunks ? parse_decode_chunks(chunks) : default_decode_chunks(cpu);
    int unset = -1;  // a test's choice stands
    g_decode_parts.compare_exchange_strong(
        unset, streams && *streams ? *streams == '2' : cpu.intel(), std::memory_order_relaxed);
    return detect_isas();
  }();
  return levels;
}

Isa parse_isa_env(Isa best) {
  const char* v = std::getenv("K3_ISA");
  if (!v || !*v) return best;
  for (Isa i : kAllIsas)
    if (!std::strcmp(v, isa_name(i))) return usable_isa(i);
  fail("K3_ISA=%s: expected scalar, avx2, avxvnni or avx512", v);
}

// Each table starts as a copy of the one below (AVX-512's of AVX2's: it does not need AVX-VNNI).
struct Tables {
  detail::KernelTable t[4];
  Tables() {
    std::memset(static_cast<void*>(t), 0, sizeof(t));
    detail::register_scalar_kernels(t[0]);
    std::memcpy(static_cast<void*>(t[1]), t[0], sizeof(t[0]));
    detail::register_avx2_kernels(t[1]);
    std::memcpy(static_cast<void*>(t[2]), t[1], sizeof(t[1]));
    detail::register_avxvnni_kernels(t[2]);
    std::memcpy(static_cast<void*>(t[3]), t[1], sizeof(t[1]));
    detail::register_avx512_kernels(t[3]);
  }
};

const Tables& tables() {
  static const Tables tab;
  return tab;
}

std::atomic<int> g_active{-1};
std::atomic<int> g_full_width{-1};  // -1: not yet detected

}  // namespace

namespace detail {
PrefetchSetting g_prefetch;
}

PrefetchSetting default_prefetch_setting(const CpuIdent& cpu) {
  if (cpu.intel()) return {PrefetchLevel::L1, 2048, true};
  return {PrefetchLevel::L2, 8192, false};
}

PrefetchSetting prefetch_setting() {
  supported_levels();
  return detail::g_prefetch;
}

void set_prefetch_setting(PrefetchSetting s) {
  supported_levels();
  detail::g_prefetch = s;
}

std::string prefetch_setting_name(PrefetchSetting s) {
  if (s.level == PrefetchLevel::Off) return "off";
  return std::string(s.level == PrefetchLevel::L2 ? "l2" : "l1") + ":" + std::to_string(s.bytes) + (s.q8_0 ? "+q8_0" : "");
}

PrefetchSetting parse_prefetch_setting(const char* text, const char* what, PrefetchSetting base) {
  PrefetchSetting s{base.level, base.bytes, false};
  std::string v = text;
  if (v == "off") return {PrefetchLevel::Off, s.bytes, false};
  constexpr std::string_view kQ8 = "+q8_0";
  if (v.size() > kQ8.size() && v.ends_with(kQ8)) s.q8_0 = true, v.resize(v.size() - kQ8.size());
  const std::string level = v.substr(0, v.find(':'));
  if (level != "l1" && level != "l2") fail("%s=%s: expected off, l1 or l2, optionally :BYTES and +q8_0", what, text);
  s.level = level == "l2" ? PrefetchLevel::L2 : PrefetchLevel::L1;
  if (level.size() < v.size()) {
    const std::string b = v.substr(level.size() + 1);
    char* end = nullptr;
    const unsigned long n = b.empty() ? 0 : std::strtoul(b.c_str(), &end, 10);
    if (b.empty() || *end || n < 256 || n > 65536 || n % 64)
      fail("%s=%s: the distance must be 256-65536 bytes, a multiple of 64", what, text);
    s.bytes = static_cast<uint32_t>(n);
  }
  return s;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::AvxVnni: return "avxvnni";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) { return (supported_levels() >> static_cast<int>(isa)) & 1; }

Isa usable_isa(Isa isa) {
  while (!isa_supported(isa)) isa = static_cast<Isa>(static_cast<int>(isa) - 1);
  return isa;
}

Isa cpu_best_isa() { return usable_isa(Isa::Avx512); }

Isa active_isa() {
  int a = g_active.load(std::memory_order_relaxed);
  if (a < 0) {
    a = static_cast<int>(parse_isa_env(cpu_best_isa()));
    g_active.store(a, std::memory_order_relaxed);
  }
  return static_cast<Isa>(a);
}

void set_isa(Isa isa) { g_active.store(static_cast<int>(usable_isa(isa)), std::memory_order_relaxed); }

CpuIdent cpu_ident() {
  uint32_t a, b, c, d;
  CpuIdent id;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return id;
  char vendor[12];
  std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
  id.vendor.assign(vendor, sizeof(vendor));
  if (!__get_cpuid(1, &a, &b, &c, &d)) return id;
  const unsigned base = (a >> 8) & 15;
  id.family = base == 15 ? base + ((a >> 20) & 255) : base;
  id.model = base == 6 || base == 15 ? ((a >> 4) & 15) | (((a >> 16) & 15) << 4) : (a >> 4) & 15;
  return id;
}

bool full_width_512() {
  int w = g_full_width.load(std::memory_order_relaxed);
  if (w < 0) g_full_width.store(w = detect_full_width_512(), std::memory_order_relaxed);
  return w;
}

void set_full_width_512(bool on) { g_full_width.store(on, std::memory_order_relaxed); }

bool decode_in_parts() {
  supported_levels();
  return g_decode_parts.load(std::memory_order_relaxed);
}

void set_decode_in_parts(bool on) { g_decode_parts.store(on, std::memory_order_relaxed); }

DecodeChunks default_decode_chunks(const CpuIdent& cpu) {
  if (cpu.intel()) return {2, 1024};
  if (cpu.amd() && cpu.family == 0x1A) return {1, 4096};
  return {4, 512};
}

DecodeChunks decode_chunks() {
  supported_levels();
  return g_decode_chunks;
}

void set_decode_chunks(DecodeChunks rule) {
  supported_levels();
  g_decode_chunks = rule;
}

const QuantKernels& kernels(GgmlType t) { return kernels(t, active_isa()); }

const QuantKernels& kernels(GgmlType t, Isa isa) {
  const uint32_t id = static_cast<uint32_t>(t);
  const TypeInfo* ti = find_type(t);
  if (!ti || !ti->computable || id >= static_cast<uint32_t>(detail::kTypeSlots))
    fail("no kernels for ggml type %u (%s)", id, ti ? ti->name : "unknown");
  return tables().t[static_cast<int>(usable_isa(isa))][id];
}

size_t quantize_rows(GgmlType t, const float* src, void* dst, int64_t nrows, int64_t n_per_row,
                     const float* imatrix) {
  return ref::quantize_rows(t, src, dst, nrows, n_per_row, imatrix);
}

bool can_quantize(GgmlType t) { return ref::can_quantize(t); }

}  // namespace k3
