// Kernel microbenchmarks: vec_dot / decode row / to_float / from_float per type and ISA, a memory read
// bandwidth probe and the row orders a decode can read in, matvec over weights larger than L3
// reported against that bandwidth, and the multi-token products (gemm: one thread, the tiled
// kernel against per-pair vec_dot).
//
//   bench_kernels                                   everything
//   bench_kernels --benchmark_filter='matvec|membw' the bandwidth acceptance only
//   K3_PREFETCH_B=l2:4096 bench_kernels --benchmark_filter=prefetch_ab
//                                                   two weight prefetch settings, paired
// vec_dot/<type>/ggml-<variant> rows run llama.cpp's own kernel (dlopen) on the same inputs.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../tests/support/ggml_cpu_oracle.h"
#include "tensor/gemm.h"
#include "tensor/kernels.h"
#include "tensor/quant_ref.h"
#include "tensor/repack.h"
#include "tensor/matmul.h"
#include "tensor/matvec.h"
#include "tensor/membw.h"
#include "tensor/threadpool.h"
#include "tensor/vecmath.h"

namespace k3 {
namespace {

using T = GgmlType;

const T kWeightTypes[] = {T::F32,  T::F16,  T::BF16, T::Q4_0, T::Q4_1, T::Q5_0,  T::Q5_1,   T::Q8_0,
                          T::Q2_K, T::Q3_K, T::Q4_K, T::Q5_K, T::Q6_K, T::MXFP4, T::IQ4_NL, T::IQ4_XS,
                          T::Q8_0_X8, T::MXFP4_LANES, T::Q4_K_LANES, T::Q1_0, T::Q2_0, T::NVFP4, T::TQ1_0, T::TQ2_0,
                          T::IQ3_XXS, T::IQ3_S, T::IQ2_XXS, T::IQ2_XS, T::IQ2_S, T::IQ1_S, T::IQ1_M};
// The types of docs/formats.md, for their tile benchmarks.
const T kLowBitTypes[] = {T::Q1_0,    T::Q2_0,    T::NVFP4,  T::TQ1_0, T::TQ2_0, T::IQ3_XXS,
                          T::IQ3_S,   T::IQ2_XXS, T::IQ2_XS, T::IQ2_S, T::IQ1_S, T::IQ1_M};
constexpr int64_t kRow = 7168;  // K3 hidden size: one row in L1/L2

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa i : kAllIsas)
    if (isa_supported(i)) v.push_back(i);
  return v;
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// rows × n weights of type t: quantized (with a flat importance matrix where ggml needs one), and
// for a repacked type (tensor/repack.h) quantized as the file type it comes from, then repacked.
void quantize_weights(T t, const float* x, uint8_t* w, int64_t rows, int64_t n) {
  const T file = t == T::MXFP4_LANES ? T::MXFP4 : t == T::Q8_0_X8 ? T::Q8_0 : t == T::Q4_K_LANES ? T::Q4_K : t;
  const std::vector<float> flat(ref::requires_imatrix(file) ? n : 0, 1.0f);
  quantize_rows(file, x, w, rows, n, flat.empty() ? nullptr : flat.data());
  if (file != t) repack_rows(file, w, rows, n, row_size(t, n));
}

std::vector<uint8_t> quantized(T t, const std::vector<float>& x) {
  std::vector<uint8_t> b(row_size(t, static_cast<int64_t>(x.size())));
  quantize_weights(t, x.data(), b.data(), 1, static_cast<int64_t>(x.size()));
  return b;
}

// Seconds f() takes.
template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The median of v (of an even count, the upper middle).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ---- per-row kernels ----------------------------------------------------------------------------

void BM_vec_dot(benchmark::State& st, T t, Isa isa) {
  const QuantKernels& k = kernels(t, isa);
  const std::vector<uint8_t> w = quantized(t, random_floats(kRow, 1));
  std::vector<uint8_t> a(row_size(k.vec_dot_type, kRow));
  const std::vector<float> x = random_floats(kRow, 2);
  kernels(k.vec_dot_type, Isa::Scalar).from_float(x.data(), a.data(), kRow);
  float s = 0;
  for (auto _ : st) {
    k.vec_dot(kRow, &s, w.data(), a.data());
    benchmark::DoNotOptimize(s);
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * w.size()));
  st.counters["Gelem/s"] = benchmark::Counter(static_cast<double>(kRow) * st.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// Rows of n inputs (one row repeated, so in cache), the activation for them (packed where the decode
// rows take it packed) and its vec_dot_type row.
struct RowCase {
  int64_t n, nr;
  size_t row;
  std::vector<uint8_t> w, a, packed;
  const uint8_t* act;  // what the decode rows read
  RowCase(T t, Isa isa, int64_t n_, size_t bytes) : n(n_) {
    const QuantKernels& k = kernels(t, isa);
    const GemmKernel* g = gemm_kernel(t, isa);
    const std::vector<uint8_t> w1 = quantized(t == T::Q2_K_SB ? T::Q2_K : t, random_floats(n, 1));  // the same bytes
    row = w1.size();
    nr = std::max<int64_t>(1, static_cast<int64_t>(bytes / row));
    w.resize(row * nr);
    for (int64_t r = 0; r < nr; ++r) std::memcpy(w.data() + r * row, w1.data(), row);
    a.resize(row_size(k.vec_dot_type, n));
    const std::vector<float> x = random_floats(n, 2);
    kernels(k.vec_dot_type, Isa::Scalar).from_float(x.data(), a.data(), n);
    packed.resize(g->packed_size(n));
    if (g->pack) g->pack(a.data(), packed.data(), n);  // else the rows read the vec_dot_type row as it is
    act = g->pack ? packed.data() : a.data();
  }
};

// The decode row kernel (gemm.h) on the same inputs, its activation packed outside the timing: one
// call over about 4 KB of rows (one row where a row is longer), as the matvec calls it.
void BM_row(benchmark::State& st, T t, Isa isa) {
  const RowCase c(t, isa, st.range(0), 4096);  // the row length: 1024 (m64's experts), 7168 (K3's hidden size)
  const GemmKernel* g = gemm_kernel(t, isa);
  std::vector<float> s(c.nr);
  for (auto _ : st) {
    g->rows(c.n, c.w.data(), c.row, c.nr, c.act, s.data());
    benchmark::DoNotOptimize(s.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * c.w.size()));
  st.counters["Gelem/s"] = benchmark::Counter(static_cast<double>(c.n * c.nr) * st.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// The decode rows against vec_dot a row (what decode takes without them) on about 128 KB of rows in
// cache, alternated in batches of 20 calls so that the host's drift hits both: rows_speedup is the
// median of the per-batch time ratios vec_dot / rows (above 1: the rows are faster).
void BM_row_vs_dot(benchmark::State& st, T t, Isa isa) {
  const RowCase c(t, isa, st.range(0), 128 << 10);
  const QuantKernels& k = kernels(t, isa);
  const GemmKernel* g = gemm_kernel(t, isa);
  std::vector<float> s(c.nr);
  auto timed = [&](bool rows) {
    return seconds([&] {
      for (int i = 0; i < 20; ++i) {
        if (rows) g->rows(c.n, c.w.data(), c.row, c.nr, c.act, s.data());
        else
          for (int64_t r = 0; r < c.nr; ++r) k.vec_dot(c.n, &s[r], c.w.data() + r * c.row, c.a.data());
        benchmark::DoNotOptimize(s.data());
      }
    });
  };
  std::vector<double> td, tr, ratio;
  for (auto _ : st) {
    td.push_back(timed(false)), tr.push_back(timed(true));
    ratio.push_back(td.back() / tr.back());
    st.SetIterationTime(td.back() + tr.back());
  }
  const double bytes = 20.0 * static_cast<double>(c.w.size());
  st.counters["vec_dot_GB/s"] = bytes / median(td) / 1e9;
  st.counters["rows_GB/s"] = bytes / median(tr) / 1e9;
  st.counters["rows_speedup"] = median(ratio);
}

// llama.cpp's kernel on the same inputs (ggml CPU backend via dlopen), for comparison.
void BM_vec_dot_ggml(benchmark::State& st, T t) {
  const test::GgmlCpu::Traits* g = test::GgmlCpu::get()->traits(static_cast<uint32_t>(t));
  const QuantKernels& k = kernels(t, Isa::Scalar);
  const std::vector<uint8_t> w = quantized(t, random_floats(kRow, 1));
  std::vector<uint8_t> a(row_size(k.vec_dot_type, kRow));
  const std::vector<float> x = random_floats(kRow, 2);
  k3::kernels(k.vec_dot_type, Isa::Scalar).from_float(x.data(), a.data(), kRow);
  float s = 0;
  for (auto _ : st) {
    g->vec_dot(static_cast<int>(kRow), &s, 0, w.data(), 0, a.data(), 0, 1);
    benchmark::DoNotOptimize(s);
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * w.size()));
  st.counters["Gelem/s"] = benchmark::Counter(static_cast<double>(kRow) * st.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void BM_to_float(benchmark::State& st, T t, Isa isa) {
  const QuantKernels& k = kernels(t, isa);
  const std::vector<uint8_t> w = quantized(t, random_floats(kRow, 3));
  std::vector<float> y(kRow);
  for (auto _ : st) {
    k.to_float(w.data(), y.data(), kRow);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * w.size()));
}

void BM_from_float(benchmark::State& st, T t, Isa isa) {
  const QuantKernels& k = kernels(t, isa);
  const std::vector<float> x = random_floats(kRow, 4);
  std::vector<uint8_t> y(row_size(t, kRow));
  for (auto _ : st) {
    k.from_float(x.data(), y.data(), kRow);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * kRow * sizeof(float)));
}

// Repacking rows in place into their lane layout (tensor/repack.h), what loading pays per byte: 64 MB
// of rows copied from 16 quantized ones, then repacked (each pass repacks the previous pass's
// output: the same work).
void BM_repack(benchmark::State& st, T t) {
  const size_t row = row_size(t, kRow);
  const int64_t rows = static_cast<int64_t>((size_t{64} << 20) / row);
  BigBuffer buf(row * rows);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(buf.data() + r * row, quantized(t, random_floats(kRow, 200 + r % 16)).data(), row);
  for (auto _ : st) {
    repack_rows(t, buf.data(), rows, kRow, row);
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * row * rows));
}

// ---- memory bandwidth -------------------------------------------------------------------------

constexpr size_t kProbeBytes = kMembwProbeBytes;

const BigBuffer& probe_buffer() {
  static const BigBuffer* buf = new BigBuffer(kProbeBytes);
  return *buf;
}

// Seconds for one multi-threaded pass over the probe buffer.
double probe_pass(ThreadPool& pool) { return read_pass(pool, probe_buffer()); }

void BM_membw(benchmark::State& st) {
  const int threads = static_cast<int>(st.range(0));
  ThreadPool pool(threads);
  probe_pass(pool);  // warm: pages touched, workers started
  double total = 0.0, best = 1e30;
  for (auto _ : st) {
    const double s = probe_pass(pool);
    total += s;
    best = std::min(best, s);
    st.SetIterationTime(s);
  }
  st.counters["GB/s"] = static_cast<double>(kProbeBytes) / best / 1e9;
  st.counters["GB/s_mean"] = static_cast<double>(kProbeBytes) * static_cast<double>(st.iterations()) / total / 1e9;
}

// ---- the pool's fork/join --------------------------------------------------------------------

// One empty parallel region (range(0) threads) back to back, as a decode token forks once per product
// batch: chunks() with one chunk a thread (matvec_batch's kind of job), or run(). The cost a region adds
// to a token beyond its work (docs/notes/i37e.md).
void BM_pool_region(benchmark::State& st, bool chunked) {
  ThreadPool pool(static_cast<int>(st.range(0)));
  const int64_t n = pool.size();
  for (auto _ : st) {
    if (chunked) pool.chunks(n, 1, [](int64_t, int64_t) {});
    else pool.run([](int, int) {});
  }
}

// ---- the order a decode reads its rows in ---------------------------------------------------

// One thread reads the probe buffer as rows of range(0) bytes, a line at a time, in one of three
// orders: row after row (one stream); rows r and r + 1 side by side, then r + 2 and r + 3 (two
// interleaved streams through one region: what a two-row decode over neighbouring rows reads);
// rows i and i + H of the buffer's two halves side by side (two sequential streams). Decides how a
// kernel that takes several rows at once must pick them (docs/performance.md, "What did not pay").
enum class RowOrder { One, Pairs, Halves };

void BM_row_order(benchmark::State& st, RowOrder order) {
  const BigBuffer& buf = probe_buffer();
  const size_t rb = static_cast<size_t>(st.range(0)), rows = buf.size() / rb / 2 * 2, h = rows / 2;
  const uint8_t* p = buf.data();
  auto line = [](const uint8_t* q) {
    uint64_t a, b;
    std::memcpy(&a, q, 8);
    std::memcpy(&b, q + 32, 8);
    return a + b;
  };
  uint64_t sum = 0;
  double best = 1e30;
  for (auto _ : st) {
    const double s = seconds([&] {
      if (order == RowOrder::One) {
        for (size_t o = 0; o + 64 <= rows * rb; o += 64) sum += line(p + o);
      } else {
        const bool pairs = order == RowOrder::Pairs;
        const size_t far = pairs ? rb : h * rb;  // from a step's first row to its second
        for (size_t i = 0; i < h; ++i) {
          const uint8_t* a = p + (pairs ? 2 * i : i) * rb;
          for (size_t o = 0; o + 64 <= rb; o += 64) sum += line(a + o) + line(a + far + o);
        }
      }
    });
    best = std::min(best, s);
    st.SetIterationTime(s);
  }
  benchmark::DoNotOptimize(sum);
  st.counters["GB/s"] = static_cast<double>(rows * rb) / best / 1e9;
}

// ---- the KDA recurrence ----------------------------------------------------------------------

// One token's delta-rule step over one head's state (d = 128, K3's head size: 64 KB, in L2), as
// kda_forward calls it per head.
void BM_delta_rule(benchmark::State& st, Isa isa) {
  constexpr int64_t d = 128;
  std::vector<float> S = random_floats(d * d, 21), in = random_floats(4 * d, 22), o(d);
  for (int64_t i = 0; i < d; ++i) in[i] = std::exp(-std::fabs(in[i]) * 0.01f);  // decays in (0, 1]
  const VecMath& vm = vecmath(isa);
  for (auto _ : st) {
    vm.delta_rule(S.data(), d, in.data(), in.data() + d, in.data() + 2 * d, in.data() + 3 * d, 0.5f, 0.088f, o.data());
    benchmark::DoNotOptimize(o.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * d * d * 4);
}

// situ over 4096 gate / up pairs (K3's β = 4, λ = 25; gates spread over [-12, 12]), in L1.
void BM_situ(benchmark::State& st, Isa isa) {
  constexpr int64_t n = 4096;
  const std::vector<float> a0 = random_floats(n, 23), b = random_floats(n, 24);
  std::vector<float> a(n);
  const SituParams p{4.0f, 0.25f, 25.0f, 0.04f};
  const VecMath& vm = vecmath(isa);
  for (auto _ : st) {
    for (int64_t i = 0; i < n; ++i) a[i] = a0[i] * 12.0f;
    vm.situ(a.data(), b.data(), n, p);
    benchmark::DoNotOptimize(a.data());
  }
  st.counters["ns/value"] = benchmark::Counter(static_cast<double>(n) * st.iterations(),
                                               benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// ---- matvec over weights larger than L3 -------------------------------------------------------

constexpr double kMatvecBytes = 1.5e9;

struct BigMatrix {
  T type;
  int64_t ne1;
  std::unique_ptr<BigBuffer> buf;
};

// One matrix at a time (1.5 GB), rows copied from a few distinct quantized rows.
const BigMatrix& big_matrix(T t) {
  static BigMatrix m{T::F32, 0, nullptr};
  if (m.buf && m.type == t) return m;
  m.buf.reset();
  const size_t row = row_size(t, kRow);
  const int64_t ne1 = static_cast<int64_t>(kMatvecBytes / static_cast<double>(row)) + 1;
  m = BigMatrix{t, ne1, std::make_unique<BigBuffer>(row * ne1)};
  std::vector<std::vector<uint8_t>> rows;
  for (uint32_t s = 0; s < 16; ++s) rows.push_back(quantized(t, random_floats(kRow, 100 + s)));
  for (int64_t r = 0; r < ne1; ++r) std::memcpy(m.buf->data() + r * row, rows[r % rows.size()].data(), row);
  return m;
}

// Each iteration times work() (its seconds) and, right after it, one pass of the bandwidth probe
// with the same threads, so both see the same machine load (the host is shared). Reported: the
// weight bytes rate (best pass and mean), the probe rate, and weight/probe ratios both as best/best
// and as the median of the per-iteration pairs.
template <class Work>
void time_against_probe(benchmark::State& st, ThreadPool& pool, double bytes, Work&& work) {
  work();  // warm
  probe_pass(pool);
  double total = 0.0, best_w = 1e30, best_p = 1e30;
  std::vector<double> ratios;
  for (auto _ : st) {
    const double tw = work();
    st.SetIterationTime(tw);
    st.PauseTiming();
    const double tp = probe_pass(pool);
    st.ResumeTiming();
    total += tw;
    best_w = std::min(best_w, tw);
    best_p = std::min(best_p, tp);
    ratios.push_back((bytes / tw) / (static_cast<double>(kProbeBytes) / tp));
  }
  st.counters["weight_GB/s"] = bytes / best_w / 1e9;
  st.counters["weight_GB/s_mean"] = bytes * static_cast<double>(st.iterations()) / total / 1e9;
  st.counters["membw_GB/s"] = static_cast<double>(kProbeBytes) / best_p / 1e9;
  st.counters["ratio"] = (bytes / best_w) / (static_cast<double>(kProbeBytes) / best_p);
  st.counters["ratio_median"] = median(ratios);
}

// The big matrix streamed once by a product of n_tok tokens on `threads` threads, read as rows of
// `width` elements (kRow, or m64's 2048).
void stream_tokens(benchmark::State& st, T t, Isa isa, int threads, int64_t n_tok, int64_t width = kRow) {
  const BigMatrix& m = big_matrix(t);
  const int64_t ne1 = static_cast<int64_t>(m.buf->size() / row_size(t, width)) / 16 * 16;  // whole lane groups
  const WeightView w{t, m.buf->data(), width, ne1, row_size(t, width)};
  const std::vector<float> x = random_floats(width * n_tok, 5);
  std::vector<float> y(ne1 * n_tok);
  ThreadPool pool(threads);
  const Isa saved = active_isa();
  set_isa(isa);
  time_against_probe(st, pool, static_cast<double>(w.nb1) * static_cast<double>(ne1),
                     [&] { return seconds([&] { matmul(w, x.data(), n_tok, y.data(), pool); }); });
  set_isa(saved);
}

void BM_matvec(benchmark::State& st, T t, Isa isa) { stream_tokens(st, t, isa, static_cast<int>(st.range(0)), 1); }

// The rows of a verify pass (range(1) tokens, on range(0) threads): each weight row is read once for
// all of them, so the weight rate should stay near matvec/'s.
void BM_few_tokens(benchmark::State& st, T t, Isa isa, int64_t width) {
  stream_tokens(st, t, isa, static_cast<int>(st.range(0)), st.range(1), width);
}

// ---- a region's start and end ------------------------------------------------------------------

// Back-to-back regions of range(1) rows of m64's width (2048) each, one product a region (cut by the
// decode chunk rule, as a token's are) through the big matrix, cold, on range(0) threads: what a
// region costs beyond its bytes. regions_raw/ cuts the probe buffer into regions of range(1) KiB,
// one chunk a thread summed by plain loads: the same cost without the kernels. Zen 5, 2 threads: a
// region costs ~2.3 us more than its bytes even for plain loads (docs/notes/i37t.md).
void BM_regions(benchmark::State& st, T t, Isa isa) {
  const BigMatrix& m = big_matrix(t);
  const int64_t width = 2048, rows = st.range(1);
  const size_t rb = row_size(t, width);
  const int64_t n = static_cast<int64_t>(m.buf->size() / rb) / rows;
  const std::vector<float> x = random_floats(width, 5);
  std::vector<float> y(rows);
  ThreadPool pool(static_cast<int>(st.range(0)));
  const Isa saved = active_isa();
  set_isa(isa);
  std::vector<uint8_t> xq;
  const void* xp = quantize_activation(t, x.data(), width, xq);
  time_against_probe(st, pool, static_cast<double>(rb) * static_cast<double>(rows * n), [&] {
    return seconds([&] {
      for (int64_t i = 0; i < n; ++i) {
        const Matvec mv{WeightView{t, m.buf->data() + i * rows * rb, width, rows, rb}, xp, y.data()};
        matvec_batch(&mv, 1, 1, pool);
      }
    });
  });
  set_isa(saved);
}

void BM_regions_raw(benchmark::State& st) {
  const BigBuffer& buf = probe_buffer();
  ThreadPool pool(static_cast<int>(st.range(0)));
  const size_t bytes = static_cast<size_t>(st.range(1)) << 10, n = buf.size() / bytes;
  const size_t share = bytes / static_cast<size_t>(pool.size()) / 64 * 64;
  std::atomic<uint64_t> sum{0};
  time_against_probe(st, pool, static_cast<double>(share * pool.size() * n), [&] {
    return seconds([&] {
      for (size_t i = 0; i < n; ++i)
        pool.chunks(pool.size(), 1, [&](int64_t c, int64_t) {
          sum.fetch_add(stream_sum(buf.data() + i * bytes + static_cast<size_t>(c) * share, share), std::memory_order_relaxed);
        });
    });
  });
  benchmark::DoNotOptimize(sum.load());
}

// ---- a token's routed experts ----------------------------------------------------------------

// What a decode token reads in a MoE layer: k of E stacked experts (gate and up [F rows of dl],
// then down [dl rows of F]), picked at random each iteration, through matvec_batch as the model
// calls it (gate and up side by side, then the downs). Many short streams start cold, unlike the
// one long stream of matvec/ (docs/performance.md, "Expert stream heads"). Shapes: m64's (1024 x
// 1024, 8 of 64) and K3's (3584 x 3072, 16 of 64 here; the stack is larger than L3 either way).
struct ExpertShape {
  int64_t dl, F, E, k;
};

void BM_experts(benchmark::State& st, T t, Isa isa, ExpertShape sh) {
  const int threads = static_cast<int>(st.range(0));
  const size_t up_bytes = row_size(t, sh.dl) * sh.F, down_bytes = row_size(t, sh.F) * sh.dl;
  const size_t per = 2 * up_bytes + down_bytes;
  BigBuffer buf(per * sh.E);
  {
    const std::vector<uint8_t> a = quantized(t, random_floats(sh.dl, 7)), b = quantized(t, random_floats(sh.F, 8));
    for (int64_t e = 0; e < sh.E; ++e) {
      uint8_t* x = buf.data() + e * per;
      for (int64_t r = 0; r < 2 * sh.F; ++r) std::memcpy(x + r * a.size(), a.data(), a.size());
      for (int64_t r = 0; r < sh.dl; ++r) std::memcpy(x + 2 * up_bytes + r * b.size(), b.data(), b.size());
    }
  }
  std::vector<uint8_t> zq, hq;
  const std::vector<float> z = random_floats(sh.dl, 5), h = random_floats(sh.F, 6);
  std::vector<float> y(static_cast<size_t>(sh.k) * (2 * sh.F + sh.dl));
  ThreadPool pool(threads);
  const Isa saved = active_isa();
  set_isa(isa);
  const void* zp = quantize_activation(t, z.data(), sh.dl, zq);
  const void* hp = quantize_activation(t, h.data(), sh.F, hq);
  std::mt19937 rng(11);
  std::vector<int64_t> ids(sh.E);
  auto token = [&] {
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<Matvec> up, down;
    for (int64_t j = 0; j < sh.k; ++j) {
      uint8_t* x = buf.data() + ids[j] * per;
      float* yj = y.data() + j * (2 * sh.F + sh.dl);
      up.push_back({WeightView{t, x, sh.dl, sh.F, row_size(t, sh.dl)}, zp, yj});
      up.push_back({WeightView{t, x + up_bytes, sh.dl, sh.F, row_size(t, sh.dl)}, zp, yj + sh.F});
      down.push_back({WeightView{t, x + 2 * up_bytes, sh.F, sh.dl, row_size(t, sh.F)}, hp, yj + 2 * sh.F});
    }
    return seconds([&] {
      matvec_batch(up.data(), up.size(), 2, pool);
      matvec_batch(down.data(), down.size(), 1, pool);
    });
  };
  time_against_probe(st, pool, static_cast<double>(per * sh.k), token);
  set_isa(saved);
}

// Two weight prefetch settings on the matvec above, alternated per iteration (which goes first
// alternates too), so that a drifting host load hits both alike: A is the setting in force
// (K3_PREFETCH or the default), B is K3_PREFETCH_B (default: A's distance at the other cache level).
// a_over_b_time, the median of the per-pair ratios t(A) / t(B), is above 1 where B reads faster.
// This is the figure behind the defaults in kernels.h; run it on a new CPU before changing them.
PrefetchSetting prefetch_b() {
  const PrefetchSetting a = prefetch_setting();
  const char* v = std::getenv("K3_PREFETCH_B");
  if (v && *v) return parse_prefetch_setting(v, "K3_PREFETCH_B", a);
  return {a.level == PrefetchLevel::L2 ? PrefetchLevel::L1 : PrefetchLevel::L2, a.bytes};
}

void BM_prefetch_ab(benchmark::State& st, T t, Isa isa) {
  const BigMatrix& m = big_matrix(t);
  const WeightView w{t, m.buf->data(), kRow, m.ne1, row_size(t, kRow)};
  const double bytes = static_cast<double>(w.nb1) * static_cast<double>(m.ne1);
  const std::vector<float> x = random_floats(kRow, 5);
  std::vector<float> y(m.ne1);
  ThreadPool pool(static_cast<int>(st.range(0)));
  const Isa saved_isa = active_isa();
  const PrefetchSetting a = prefetch_setting(), b = prefetch_b();
  set_isa(isa);
  auto timed = [&](PrefetchSetting s) {
    set_prefetch_setting(s);
    return seconds([&] { matmul(w, x.data(), 1, y.data(), pool); });
  };
  timed(a);  // warm
  std::vector<double> ta, tb, ratio;
  for (auto _ : st) {
    const bool a_first = ta.size() % 2 == 0;
    const double first = timed(a_first ? a : b), second = timed(a_first ? b : a);
    ta.push_back(a_first ? first : second), tb.push_back(a_first ? second : first);
    ratio.push_back(ta.back() / tb.back());
    st.SetIterationTime(first + second);
  }
  set_isa(saved_isa);
  set_prefetch_setting(a);
  st.counters["a_GB/s"] = bytes / median(ta) / 1e9;
  st.counters["b_GB/s"] = bytes / median(tb) / 1e9;
  st.counters["a_over_b_time"] = median(ratio);
}

// Multi-token product (prefill): weights in cache, compute bound. ne1 rows × n inputs by n_tokens
// tokens on st.range(0) threads, the activations' quantization included.
void BM_matmul_tokens(benchmark::State& st, T t, Isa isa, int64_t ne1, int64_t n, int64_t n_tokens) {
  const std::vector<float> wf = random_floats(n * ne1, 6);
  std::vector<uint8_t> w(row_size(t, n) * ne1);
  quantize_weights(t, wf.data(), w.data(), ne1, n);
  const std::vector<float> x = random_floats(n * n_tokens, 7);
  std::vector<float> y(ne1 * n_tokens);
  ThreadPool pool(static_cast<int>(st.range(0)));
  const WeightView wv{t, w.data(), n, ne1, row_size(t, n)};
  const Isa saved = active_isa();
  set_isa(isa);
  for (auto _ : st) matmul(wv, x.data(), n_tokens, y.data(), pool);
  set_isa(saved);
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * ne1 * n_tokens * st.iterations() / 1e9, benchmark::Counter::kIsRate);
}

// One matmul work item's shape on one thread: 64 rows of n = range(0) inputs × 16 tokens,
// through the tiled kernel (activations packed outside the timing) or one vec_dot per output.
void BM_gemm(benchmark::State& st, T t, Isa isa, bool tiled) {
  const int64_t rows = 64, n_tokens = 16, kRow = st.range(0);
  const QuantKernels& kw = kernels(t, isa);
  const GemmKernel* g = gemm_kernel(t, isa);
  if (tiled && !g) {
    st.SkipWithError("no tiled kernel for this type and ISA");
    return;
  }
  const size_t wrow = row_size(t, kRow), arow = row_size(kw.vec_dot_type, kRow);
  std::vector<uint8_t> w(wrow * rows), a(arow * n_tokens);
  quantize_weights(t, random_floats(kRow * rows, 8).data(), w.data(), rows, kRow);
  const std::vector<float> x = random_floats(kRow * n_tokens, 9);
  for (int64_t k = 0; k < n_tokens; ++k) kernels(kw.vec_dot_type, isa).from_float(x.data() + k * kRow, a.data() + k * arow, kRow);
  const bool pack = tiled && g->packed_size(kRow) > 0;
  const size_t ps = pack ? g->packed_size(kRow) : arow;
  std::vector<uint8_t> packed(ps * n_tokens);
  for (int64_t k = 0; k < n_tokens; ++k) {
    if (pack) g->pack(a.data() + k * arow, packed.data() + k * ps, kRow);
    else std::memcpy(packed.data() + k * ps, a.data() + k * arow, arow);
  }
  std::vector<float> y(rows * n_tokens);
  for (auto _ : st) {
    if (tiled) g->run(kRow, w.data(), wrow, rows, packed.data(), ps, n_tokens, y.data(), rows);
    else
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < n_tokens; ++k) kw.vec_dot(kRow, &y[k * rows + r], w.data() + r * wrow, a.data() + k * arow);
    benchmark::DoNotOptimize(y.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * kRow * rows * n_tokens * st.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void register_all() {
  for (T t : kWeightTypes)
    for (Isa isa : isas()) {
      const std::string suffix = std::string(type_name(t)) + "/" + isa_name(isa);
      benchmark::RegisterBenchmark(("vec_dot/" + suffix).c_str(), BM_vec_dot, t, isa);
      if (const GemmKernel* g = gemm_kernel(t, isa); g && g->rows) {
        auto* b = benchmark::RegisterBenchmark(("row/" + suffix).c_str(), BM_row, t, isa);
        for (const int64_t n : {int64_t{128}, int64_t{256}, int64_t{1024}, kRow})
          if (n % type_info(t).block == 0) b->Arg(n);  // the lane layouts come in 256-element groups
      }
      benchmark::RegisterBenchmark(("to_float/" + suffix).c_str(), BM_to_float, t, isa);
    }
  // The rows against vec_dot: the types whose decode would otherwise take vec_dot (not k3's own
  // layouts, whose vec_dot is a reference), and Q2_K_SB (Q2_K as llama.cpp's AVX-512 builds repack it).
  std::vector<T> row_types(std::begin(kWeightTypes), std::end(kWeightTypes));
  row_types.push_back(T::Q2_K_SB);
  for (T t : row_types)
    for (Isa isa : isas())
      if (const GemmKernel* g = gemm_kernel(t, isa); g && g->rows && t != T::MXFP4_LANES && t != T::Q8_0_X8 && t != T::Q4_K_LANES)
        benchmark::RegisterBenchmark(("row_vs_dot/" + std::string(type_name(t)) + "/" + isa_name(isa)).c_str(), BM_row_vs_dot, t, isa)
            ->Arg(2048)->Arg(kRow)->UseManualTime()->Iterations(200);
  if (test::GgmlCpu::get())
    for (T t : kWeightTypes)
      if (t != T::MXFP4_LANES && t != T::Q8_0_X8 && t != T::Q4_K_LANES)  // k3's own layouts
        benchmark::RegisterBenchmark(("vec_dot/" + std::string(type_name(t)) + "/ggml-" + test::GgmlCpu::get()->variant()).c_str(),
                                   BM_vec_dot_ggml, t);
  for (T t : {T::F16, T::BF16, T::Q8_0, T::Q8_1, T::Q8_K})
    for (Isa isa : isas())
      benchmark::RegisterBenchmark(("from_float/" + std::string(type_name(t)) + "/" + isa_name(isa)).c_str(), BM_from_float, t, isa);
  for (auto [name, order] : {std::pair{"one", RowOrder::One}, {"pairs", RowOrder::Pairs}, {"halves", RowOrder::Halves}})
    benchmark::RegisterBenchmark(("row_order/" + std::string(name)).c_str(), BM_row_order, order)
        ->Arg(544)->Arg(3808)->Arg(7616)->UseManualTime()->Iterations(4)->Unit(benchmark::kMillisecond);
  for (T t : {T::Q8_0, T::MXFP4})
    benchmark::RegisterBenchmark(("repack/" + std::string(type_name(t))).c_str(), BM_repack, t)->Unit(benchmark::kMillisecond);
  for (Isa isa : isas())
    if (isa != Isa::AvxVnni)  // vector math has no AVX-VNNI form
    {
      benchmark::RegisterBenchmark(("delta_rule/" + std::string(isa_name(isa))).c_str(), BM_delta_rule, isa);
      benchmark::RegisterBenchmark(("situ/" + std::string(isa_name(isa))).c_str(), BM_situ, isa);
    }
  benchmark::RegisterBenchmark("pool/chunks", BM_pool_region, true)->Arg(2);
  benchmark::RegisterBenchmark("pool/run", BM_pool_region, false)->Arg(2);
  benchmark::RegisterBenchmark("membw", BM_membw)->Arg(1)->Arg(2)->UseManualTime()->MinTime(2.0)->Unit(benchmark::kMillisecond);
  for (T t : {T::Q4_K, T::Q4_K_LANES, T::Q8_0, T::Q8_0_X8, T::MXFP4, T::MXFP4_LANES, T::Q2_K, T::Q3_K, T::Q5_K, T::Q6_K,
              T::F32, T::F16, T::BF16, T::Q4_0, T::IQ4_NL})
    for (Isa isa : isas()) {
      if (isa == Isa::Scalar) continue;  // minutes per pass; not a bandwidth candidate
      benchmark::RegisterBenchmark(("matvec/" + std::string(type_name(t)) + "/" + isa_name(isa)).c_str(), BM_matvec, t, isa)
          ->Arg(1)->Arg(2)->UseManualTime()->Iterations(8)->Unit(benchmark::kMillisecond);
    }
  // m64's products: kda_gate's 160 KB to a KDA layer's 9 MB (rows of 1152 bytes as Q4_K_LANES)
  for (T t : {T::Q4_K_LANES, T::MXFP4_LANES})
    for (Isa isa : isas())
      if (isa != Isa::Scalar)
        benchmark::RegisterBenchmark(("regions/" + std::string(type_name(t)) + "/" + isa_name(isa)).c_str(), BM_regions, t, isa)
            ->ArgsProduct({{1, 2}, {160, 320, 1024, 2048, 8192}})->UseManualTime()->Iterations(6)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("regions_raw", BM_regions_raw)
      ->ArgsProduct({{1, 2}, {180, 360, 1152, 2304, 9216}})->UseManualTime()->Iterations(6)->Unit(benchmark::kMillisecond);
  // K3's width, and m64's 2048 (few_tokens_2048/: a verify pass's trunk products of m64).
  for (auto [name, width] : {std::pair{"few_tokens/", kRow}, {"few_tokens_2048/", int64_t{2048}}})
    for (T t : {T::F32, T::F16, T::BF16, T::Q8_0_X8, T::Q4_K, T::MXFP4_LANES})
      for (Isa isa : isas())
        if (isa != Isa::Scalar)
          benchmark::RegisterBenchmark((name + std::string(type_name(t)) + "/" + isa_name(isa)).c_str(), BM_few_tokens, t, isa, width)
              ->ArgsProduct({{2}, {1, 2, 3, 4, 8}})->UseManualTime()->Iterations(6)->Unit(benchmark::kMillisecond);
  for (auto [name, sh] : {std::pair{"m64", ExpertShape{1024, 1024, 64, 8}}, {"k3", ExpertShape{3584, 3072, 64, 16}}})
    for (T t : {T::MXFP4, T::MXFP4_LANES, T::Q4_K, T::IQ2_XXS, T::IQ1_S})
      for (Isa isa : isas())
        if (isa != Isa::Scalar)
          benchmark::RegisterBenchmark(("experts/" + std::string(name) + "/" + type_name(t) + "/" + isa_name(isa)).c_str(), BM_experts, t, isa, sh)
              ->Arg(1)->Arg(2)->UseManualTime()->Iterations(40)->Unit(benchmark::kMillisecond);
  for (T t : {T::Q8_0, T::Q8_0_X8, T::MXFP4, T::MXFP4_LANES, T::BF16, T::Q4_K})
    for (Isa isa : isas())
      if (isa != Isa::Scalar)
        benchmark::RegisterBenchmark(("prefetch_ab/" + std::string(type_name(t)) + "/" + isa_name(isa)).c_str(), BM_prefetch_ab, t, isa)
            ->Arg(1)->Arg(2)->UseManualTime()->Iterations(12)->Unit(benchmark::kMillisecond);
  std::vector<T> gemm_types = {T::F32, T::F16, T::BF16, T::Q8_0, T::Q8_0_X8, T::MXFP4, T::MXFP4_LANES, T::Q4_0, T::Q4_K, T::Q4_K_LANES};
  gemm_types.insert(gemm_types.end(), std::begin(kLowBitTypes), std::end(kLowBitTypes));
  for (T t : gemm_types)
    for (Isa isa : isas())
      for (bool tiled : {true, false}) {
        if (isa == Isa::Scalar) continue;
        const std::string name = "gemm/" + std::string(type_name(t)) + "/" + isa_name(isa) + (tiled ? "/tiled" : "/vec_dot");
        benchmark::RegisterBenchmark(name.c_str(), BM_gemm, t, isa, tiled)->Arg(512)->Arg(2048)->Arg(kRow)->Unit(benchmark::kMillisecond);
      }
  for (T t : {T::F32, T::Q4_K, T::Q8_0, T::Q8_0_X8, T::MXFP4, T::MXFP4_LANES, T::IQ2_XXS, T::IQ1_S})
    for (Isa isa : isas())
      if (isa != Isa::Scalar) {
        benchmark::RegisterBenchmark(("matmul_64tok/" + std::string(type_name(t)) + "/" + isa_name(isa)).c_str(), BM_matmul_tokens, t,
                                     isa, 2048, kRow, 64)
            ->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
        // A routed expert's gate of the medium preset at pp512: 1024 × 1024, 32 tokens.
        benchmark::RegisterBenchmark(("matmul_expert/" + std::string(type_name(t)) + "/" + isa_name(isa)).c_str(), BM_matmul_tokens, t,
                                     isa, 1024, 1024, 32)
            ->Arg(1)->Unit(benchmark::kMicrosecond);
      }
}

}  // namespace
}  // namespace k3

int main(int argc, char** argv) {
  setenv("K3_SOURCE_DIR", K3_SOURCE_ROOT, 0);  // where the ggml reference library lives
  k3::register_all();
  benchmark::AddCustomContext("k3_prefetch", k3::prefetch_setting_name(k3::prefetch_setting()));
  benchmark::AddCustomContext("k3_prefetch_ab", k3::prefetch_setting_name(k3::prefetch_setting()) + " (A) against " +
                                                    k3::prefetch_setting_name(k3::prefetch_b()) + " (B)");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
