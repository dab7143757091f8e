#include "tensor/matvec.h"

#include <algorithm>

#include "common/error.h"
#include "tensor/gemm.h"
#include "tensor/kernels.h"
#include "tensor/scratch.h"

namespace k3 {

namespace {

// Weight bytes per work chunk: about `per_thread` claims per thread in a region, within
// [kMinChunkBytes, max], by CPU (decode_chunks, kernels.h). Long contiguous streams a claim pay;
// smaller pieces let a preempted thread's share be taken over and split a small matrix over the
// threads. Zen 4: four claims of <= 512 KB decode 30 % (AVX2) / 11 % (AVX-512) faster at 2 threads
// than fixed 64 KB chunks (docs/performance.md, "Threads and chunks"). Intel: a chunk's start costs
// more than the tail it saves, 2 of <= 1 MB 1.015-1.04x (docs/notes/i37m.md, i37p.md). Zen 5: 1 of
// <= 4 MB 1.03-1.06x against four of <= 512 KB (i37q.md).
constexpr size_t kMinChunkBytes = 64 * 1024;
// Groups per region (the chunk table lives on the stack); longer batches run as several regions.
constexpr size_t kMaxGroups = 64;

// How product j's rows are computed. One token: the ISA's decode row kernel on the packed activation
// where it has one (same bits as vec_dot, gemm.h), else vec_dot on the activation as given. Several:
// the ISA's tiles over all of them (each weight row read once), else vec_dot per (row, token).
struct Kernel {
  void (*rows)(int64_t, const void*, size_t, int64_t, const void*, float*);
  void (*run)(int64_t, const void*, size_t, int64_t, const void*, size_t, int64_t, float*, int64_t);
  void (*vec_dot)(int64_t, float*, const void*, const void*);
  const void* act;
  size_t astride;  // bytes between the tokens' activations
  bool prefetches;
  bool whole;  // rows or run takes all the rows of a chunk in one call (GemmKernel::rows_in_parts, few)
};

// Weight bytes of one product a decode kernel call covers before the next product's turn.
constexpr size_t kStepBytes = 4096;
// Rows a tile call of several tokens covers at least, so that tiles of two weight rows (BF16) load
// each activation vector once for both. bench_kernels few_tokens at K3's width, 4 tokens, two
// threads on AMD Zen 5: BF16 36.1 GB/s of weights at 2 rows, 27.6 at 1; the 1-row lane tiles lose
// some (Q8_0_X8 26.8 against 31.9; 19.4 before streaming) (docs/notes/i38b.md).
constexpr int64_t kTileStepRows = 2;

// The first prefetch_distance() bytes of rows [r0, r1) of each product: the prefetches during the
// rows run that far ahead of the reads, so without these a stream that starts cold (the next
// expert, the next matrix) waits on its first lines. A token's experts are many short streams:
// bench_kernels experts/m64 read 2.5 % faster at one thread, 9-10 % at two (docs/performance.md,
// "Lane layouts", stop 31).
void prefetch_heads(const Matvec* m, size_t n, int64_t r0, int64_t r1) {
  const size_t ahead = prefetch_distance();
  for (size_t j = 0; j < n; ++j) {
    const auto* b = static_cast<const char*>(m[j].w.data) + r0 * m[j].w.nb1;
    const size_t len = std::min(ahead, static_cast<size_t>(r1 - r0) * m[j].w.nb1);
    for (size_t o = 0; o < len; o += 64) prefetch_weights(b + o);
  }
}

// Rows [r0, r1) of the products m[0..n), a few rows of each in turn (about kStepBytes of the widest),
// so that the n streams advance together and each stays prefetched, while one decode kernel call
// serves several short rows; a decode kernel that runs its rows in parts (GemmKernel::rows_in_parts)
// and the tiles of a few tokens (GemmKernel::few) get all of them in one call. Kernels that do not
// prefetch themselves (the other tiles of several tokens) get the lines up to prefetch_distance()
// past each row's end requested before its dots: rows are about a page long and the hardware
// prefetchers do not follow a stream across pages.
void rows(const Matvec* m, const Kernel* k, size_t n, int64_t r0, int64_t r1) {
  constexpr size_t kMaxStreams = 8;
  K3_ASSERT(n <= kMaxStreams);
  uintptr_t pf[kMaxStreams];
  size_t wrow[kMaxStreams], widest = 1;
  const size_t ahead = prefetch_distance();
  const bool prefetch = prefetch_enabled();
  bool several = false;  // tokens: tile calls of kTileStepRows rows at least
  bool whole = false;     // one call for rows [r0, r1)
  for (size_t j = 0; j < n; ++j) {
    wrow[j] = row_size(m[j].w.type, m[j].w.ne0);
    widest = std::max(widest, wrow[j]);
    several |= m[j].n_tok > 1;
    whole |= k[j].whole;
    pf[j] = (reinterpret_cast<uintptr_t>(m[j].w.data) + r0 * m[j].w.nb1 + ahead) & ~uintptr_t{63};
  }
  if (prefetch) prefetch_heads(m, n, r0, r1);
  // the lines of product j up to `ahead` past the end of the row at `row`
  auto ahead_of = [&](size_t j, const uint8_t* row) {
    if (k[j].prefetches || !prefetch) return;
    for (const uintptr_t end = reinterpret_cast<uintptr_t>(row + wrow[j]) + ahead; pf[j] < end; pf[j] += 64)
      prefetch_weights(reinterpret_cast<const char*>(pf[j]));
  };
  const int64_t step =
      whole ? r1 - r0 : std::max<int64_t>(several ? kTileStepRows : 1, static_cast<int64_t>(kStepBytes / widest));
  for (int64_t s = r0; s < r1; s += step) {
    const int64_t e = std::min(r1, s + step);
    for (size_t j = 0; j < n; ++j) {
      const Matvec& mj = m[j];
      const auto* w = static_cast<const uint8_t*>(mj.w.data);
      if (k[j].rows) {
        k[j].rows(mj.w.ne0, w + s * mj.w.nb1, mj.w.nb1, e - s, k[j].act, mj.y + s);
        continue;
      }
      if (k[j].run) {
        ahead_of(j, w + (e - 1) * mj.w.nb1);
        k[j].run(mj.w.ne0, w + s * mj.w.nb1, mj.w.nb1, e - s, k[j].act, k[j].astride, mj.n_tok, mj.y + s, mj.ldy);
        continue;
      }
      const auto* act = static_cast<const uint8_t*>(k[j].act);
      for (int64_t r = s; r < e; ++r) {
        const uint8_t* row = w + r * mj.w.nb1;
        ahead_of(j, row);
        for (int64_t t = 0; t < mj.n_tok; ++t) k[j].vec_dot(mj.w.ne0, mj.y + t * mj.ldy + r, row, act + t * k[j].astride);
      }
    }
  }
}

// The kernels of mv[0..n), with the activations packed into `packs` on the calling thread once per
// distinct (activations, packing) pair.
void choose_kernels(const Matvec* mv, size_t n, Kernel* k, MatvecPacks& packs) {
  size_t used = 0;
  const Isa isa = active_isa();
  for (size_t i = 0; i < n; ++i) {
    const Matvec& m = mv[i];
    const QuantKernels& kw = kernels(m.w.type);
    const GemmKernel* g = gemm_kernel(m.w.type, isa);
    const bool one = m.n_tok == 1;
    k[i] = {nullptr, nullptr, kw.vec_dot, m.xq, m.xstride, kw.dot_prefetches, false};
    if (!g || (one && !g->rows)) continue;
    if (one) k[i].rows = g->rows, k[i].prefetches = true, k[i].whole = g->rows_in_parts;
    else if (g->few) k[i].run = g->few, k[i].prefetches = true, k[i].whole = true;
    else k[i].run = g->run;
    const size_t ps = g->packed_size(m.w.ne0);
    if (ps == 0) continue;  // the tiles read the activations as they are
    for (size_t p = 0; p < i && k[i].act == m.xq; ++p)
      if (mv[p].xq == m.xq && mv[p].n_tok == m.n_tok && mv[p].xstride == m.xstride && mv[p].w.ne0 == m.w.ne0 &&
          (k[p].rows || k[p].run) && gemm_kernel(mv[p].w.type, isa)->pack == g->pack)
        k[i].act = k[p].act, k[i].astride = k[p].astride;
    if (k[i].act != m.xq) continue;
    if (packs.size() <= used) packs.resize(used + 1);
    scratch_size(packs[used], static_cast<size_t>(m.n_tok) * ps);
    for (int64_t t = 0; t < m.n_tok; ++t)
      g->pack(static_cast<const uint8_t*>(m.xq) + t * m.xstride, packs[used].data() + t * ps, m.w.ne0);
    k[i].act = packs[used++].data();
    k[i].astride = ps;
  }
}

}  // namespace

const void* quantize_activation(GgmlType wtype, const float* x, int64_t n, std::vector<uint8_t>& buf) {
  const GgmlType vt = kernels(wtype).vec_dot_type;
  if (vt == GgmlType::F32) return x;
  const size_t bytes = row_size(vt, n);
  if (buf.size() < bytes) buf.resize(bytes);
  kernels(vt).from_float(x, buf.data(), n);
  return buf.data();
}

namespace {
using Then = FnRef<void(size_t, int64_t, int64_t)>;

void run_batch(const Matvec* mv, size_t n, size_t group, ThreadPool& pool, int64_t row_align, const Then* then) {
  K3_ASSERT(group >= 1 && group <= 8 && n % group == 0 && row_align >= 1);
  for (size_t i = 0; i < n; ++i) {
    const QuantKernels& kw = kernels(mv[i].w.type);
    if (!kw.vec_dot) fail("matvec: no dot product for weight type %s", type_info(mv[i].w.type).name);
    if (mv[i].w.ne1 != mv[i - i % group].w.ne1) fail("matvec: products of one group differ in rows");
  }
  const size_t n_groups = n / group;
  if (n_groups > kMaxGroups) {
    const size_t step = kMaxGroups * group;
    for (size_t g0 = 0; g0 < n; g0 += step) {
      auto shifted = [&, base = g0 / group](size_t g, int64_t r0, int64_t r1) { (*then)(base + g, r0, r1); };
      const Then part(shifted);
      run_batch(mv + g0, std::min(step, n - g0), group, pool, row_align, then ? &part : nullptr);
    }
    return;
  }
  // Chunk table: group g has chunks [first[g], first[g + 1]) of grain[g] rows each.
  int64_t first[kMaxGroups + 1], grain[kMaxGroups];
  size_t row_bytes[kMaxGroups], bytes = 0;
  for (size_t g = 0; g < n_groups; ++g) {
    row_bytes[g] = 0;
    for (size_t j = 0; j < group; ++j) row_bytes[g] += mv[g * group + j].w.nb1;
    bytes += row_bytes[g] * static_cast<size_t>(mv[g * group].w.ne1);
  }
  const DecodeChunks rule = decode_chunks();
  const size_t chunk_bytes = std::clamp(bytes / (static_cast<size_t>(pool.size()) * rule.per_thread), kMinChunkBytes,
                                        rule.max_kib * 1024);
  first[0] = 0;
  for (size_t g = 0; g < n_groups; ++g) {
    const int64_t ne1 = mv[g * group].w.ne1;
    int64_t rows_per = static_cast<int64_t>(chunk_bytes / std::max<size_t>(1, row_bytes[g]));
    rows_per = std::max(row_align, rows_per / row_align * row_align);
    grain[g] = rows_per;
    first[g + 1] = first[g] + (ne1 + rows_per - 1) / rows_per;
  }
  Kernel kern[kMaxGroups * 8];
  thread_local MatvecPacks packs;
  choose_kernels(mv, n, kern, packs);
  auto chunk = [&](int64_t c) {
    const size_t g = static_cast<size_t>(std::upper_bound(first, first + n_groups + 1, c) - first - 1);
    const int64_t r0 = (c - first[g]) * grain[g], r1 = std::min(mv[g * group].w.ne1, r0 + grain[g]);
    rows(mv + g * group, kern + g * group, group, r0, r1);
    if (then) (*then)(g, r0, r1);
  };
  if (bytes < kMinChunkBytes) {
    for (int64_t c = 0; c < first[n_groups]; ++c) chunk(c);
    return;
  }
  pool.chunks(first[n_groups], 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) chunk(c);
  });
}
}  // namespace

void matvec_batch(const Matvec* mv, size_t n, size_t group, ThreadPool& pool, int64_t row_align, Then then) {
  run_batch(mv, n, group, pool, row_align, &then);
}

void matvec_batch(const Matvec* mv, size_t n, size_t group, ThreadPool& pool) {
  run_batch(mv, n, group, pool, 1, nullptr);
}

void matvec_here(const Matvec* mv, size_t n, MatvecPacks& packs) {
  constexpr size_t kMax = 8;
  K3_ASSERT(n <= kMax);
  Kernel kern[kMax];
  choose_kernels(mv, n, kern, packs);
  for (size_t i = 0; i < n; ++i) rows(mv + i, kern + i, 1, 0, mv[i].w.ne1);
}

}  // namespace k3
