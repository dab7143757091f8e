#include "tensor/matvec.h"

#include <algorithm>
#include <atomic>

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
// <= 4 MB 1.03-1.06x against four of <= 512 KB (i37q.md), taken 128 KB at a time so that a thread
// out of chunks takes over half of another's rest (Region), 0.99-1.04x more (i37r.md).
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
// prefetchers do not follow a stream across pages. With `pieces`, the rows are taken as it hands
// them out (pieces(row) gives the end of the next run of rows from `row`, `row` when none is left);
// returns the row where the work stopped.
using Pieces = FnRef<int64_t(int64_t)>;
int64_t rows(const Matvec* m, const Kernel* k, size_t n, int64_t r0, int64_t r1, const Pieces* pieces = nullptr) {
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
  int64_t limit = pieces ? r0 : r1;  // rows taken: [s, limit)
  int64_t s = r0;
  for (int64_t e; s < r1; s = e) {
    if (s >= limit && (limit = (*pieces)(s)) <= s) break;
    e = std::min(limit, s + step);
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
  return std::min(s, r1);
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

// A thread's claim in a region: the chunk it works on and the rows [pos, end) of it (counted from
// the chunk's first row) it has not taken yet, in one word, so that taking the next piece and
// splitting off the back half are one compare-and-swap each. Zero: nothing left.
struct alignas(64) Claim {
  static constexpr int kRowBits = 20;
  static constexpr int64_t kMaxRows = int64_t{1} << kRowBits;
  static constexpr int64_t kMaxChunks = int64_t{1} << (64 - 2 * kRowBits);
  static uint64_t pack(int64_t c, int64_t pos, int64_t end) {
    return static_cast<uint64_t>(c) << (2 * kRowBits) | static_cast<uint64_t>(pos) << kRowBits | static_cast<uint64_t>(end);
  }
  static int64_t chunk(uint64_t w) { return static_cast<int64_t>(w >> (2 * kRowBits)); }
  static int64_t pos(uint64_t w) { return static_cast<int64_t>((w >> kRowBits) & (kMaxRows - 1)); }
  static int64_t end(uint64_t w) { return static_cast<int64_t>(w & (kMaxRows - 1)); }
  std::atomic<uint64_t> word{0};
};

// The products of one region cut into chunks: group g has chunks [first[g], first[g + 1]) of
// grain[g] rows each, claimed in order by whichever thread is free. With pieces (DecodeChunks::
// steal_kib), a thread takes its chunk's rows a piece at a time, and a thread out of chunks splits
// off the back half of the largest range still untaken (a slower or preempted thread's) and works
// it, until none is worth a split: the threads end a region together.
class Region {
 public:
  Region(const Matvec* mv, size_t n, size_t group, int n_threads, int64_t row_align, const Then* then)
      : mv_(mv), group_(group), n_groups_(n / group), row_align_(row_align), then_(then) {
    size_t bytes = 0;
    for (size_t g = 0; g < n_groups_; ++g) {
      row_bytes_[g] = 0;
      for (size_t j = 0; j < group; ++j) row_bytes_[g] += mv[g * group + j].w.nb1;
      bytes += row_bytes_[g] * static_cast<size_t>(mv[g * group].w.ne1);
    }
    bytes_ = bytes;
    const DecodeChunks rule = decode_chunks();
    const size_t chunk_bytes =
        std::clamp(bytes / (static_cast<size_t>(n_threads) * rule.per_thread), kMinChunkBytes, rule.max_kib * 1024);
    first_[0] = 0;
    for (size_t g = 0; g < n_groups_; ++g) {
      const int64_t ne1 = mv[g * group].w.ne1;
      int64_t rows_per = static_cast<int64_t>(chunk_bytes / std::max<size_t>(1, row_bytes_[g]));
      rows_per = std::max(row_align, rows_per / row_align * row_align);
      grain_[g] = rows_per;
      first_[g + 1] = first_[g] + (ne1 + rows_per - 1) / rows_per;
    }
    thread_local MatvecPacks packs;
    choose_kernels(mv, n, kern_, packs);
    piece_ = first_[n_groups_] < Claim::kMaxChunks ? rule.steal_kib * 1024 : 0;
    for (size_t g = 0; g < n_groups_; ++g) {
      piece_rows_[g] = 0;  // 0: the group's chunks are not split (a kernel takes a chunk in one call)
      bool whole = std::min(grain_[g], mv[g * group].w.ne1) >= Claim::kMaxRows;
      for (size_t j = 0; j < group; ++j) whole |= kern_[g * group + j].whole;
      if (piece_ && !whole)
        piece_rows_[g] = std::max(row_align, static_cast<int64_t>(piece_ / row_bytes_[g]) / row_align * row_align);
    }
  }
  size_t bytes() const { return bytes_; }
  int64_t chunks() const { return first_[n_groups_]; }
  bool pieces() const { return piece_ > 0; }

  // Chunk c, on the calling thread alone.
  void run(int64_t c) {
    const size_t g = group_of(c);
    const int64_t r0 = chunk_start(g, c), r1 = std::min(mv_[g * group_].w.ne1, r0 + grain_[g]);
    rows(mv_ + g * group_, kern_ + g * group_, group_, r0, r1);
    if (then_) (*then_)(g, r0, r1);
  }
  // Chunk c on a thread that publishes what it has not taken in `mine`.
  void run(Claim& mine, int64_t c) {
    const size_t g = group_of(c);
    const int64_t r0 = chunk_start(g, c);
    run(mine, c, g, r0, r0, std::min(mv_[g * group_].w.ne1, r0 + grain_[g]));
  }
  // A thread out of chunks: the back halves of the others' ranges (claims[0..n)), while one is at
  // least two pieces.
  void help(Claim& mine, Claim* claims, size_t n) {
    for (;;) {
      size_t victim = n, most = 0;
      uint64_t w = 0;
      for (size_t i = 0; i < n; ++i) {
        const uint64_t v = claims[i].word.load(std::memory_order_acquire);
        const int64_t left = Claim::end(v) - Claim::pos(v);
        const size_t b = left > 0 ? static_cast<size_t>(left) * row_bytes_[group_of(Claim::chunk(v))] : 0;
        if (b > most) most = b, victim = i, w = v;
      }
      if (victim == n || most < 2 * piece_) return;
      const int64_t c = Claim::chunk(w), pos = Claim::pos(w), end = Claim::end(w);
      const int64_t mid = pos + ((end - pos) / 2 + row_align_ - 1) / row_align_ * row_align_;
      if (mid >= end) return;  // rows wider than half a piece: nothing to split
      if (!claims[victim].word.compare_exchange_strong(w, Claim::pack(c, pos, mid), std::memory_order_acq_rel)) continue;
      const size_t g = group_of(c);
      const int64_t r0 = chunk_start(g, c);
      run(mine, c, g, r0, r0 + mid, r0 + end);
    }
  }

 private:
  size_t group_of(int64_t c) const {
    return static_cast<size_t>(std::upper_bound(first_, first_ + n_groups_ + 1, c) - first_ - 1);
  }
  int64_t chunk_start(size_t g, int64_t c) const { return (c - first_[g]) * grain_[g]; }
  // Rows [a, b) of chunk c (group g, first row r0), a piece at a time where the group is split.
  void run(Claim& mine, int64_t c, size_t g, int64_t r0, int64_t a, int64_t b) {
    const Matvec* m = mv_ + g * group_;
    const Kernel* k = kern_ + g * group_;
    int64_t done = b;
    if (const int64_t piece = piece_rows_[g]; piece == 0) {
      rows(m, k, group_, a, b);
    } else {
      mine.word.store(Claim::pack(c, a - r0, b - r0), std::memory_order_release);
      auto next = [&](int64_t at) {  // the end of the next piece from row `at`, `at` if none is left
        uint64_t w = mine.word.load(std::memory_order_acquire);
        for (;;) {
          const int64_t end = r0 + Claim::end(w);
          if (at >= end) return at;
          const int64_t e = std::min(end, at + piece);
          if (mine.word.compare_exchange_weak(w, Claim::pack(c, e - r0, end - r0), std::memory_order_acq_rel)) return e;
        }
      };
      const Pieces p(next);
      done = rows(m, k, group_, a, b, &p);
    }
    if (then_) (*then_)(g, a, done);
  }

  const Matvec* mv_;
  size_t group_, n_groups_;
  int64_t row_align_;
  const Then* then_;
  size_t bytes_ = 0, piece_ = 0;
  int64_t first_[kMaxGroups + 1], grain_[kMaxGroups], piece_rows_[kMaxGroups];
  size_t row_bytes_[kMaxGroups];
  Kernel kern_[kMaxGroups * 8];
};

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
  Region region(mv, n, group, pool.size(), row_align, then);
  if (region.bytes() < kMinChunkBytes) {
    for (int64_t c = 0; c < region.chunks(); ++c) region.run(c);
    return;
  }
  if (!region.pieces()) {
    pool.chunks(region.chunks(), 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) region.run(c);
    });
    return;
  }
  const size_t n_threads = static_cast<size_t>(pool.size());
  thread_local std::vector<Claim> t_claims;  // the caller's: the workers reach them through `claims`
  if (t_claims.size() < n_threads) t_claims = std::vector<Claim>(n_threads);
  Claim* const claims = t_claims.data();
  for (size_t i = 0; i < n_threads; ++i) claims[i].word.store(0, std::memory_order_relaxed);
  pool.chunks(
      region.chunks(), 1,
      [&](int ith, int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) region.run(claims[ith], c);
      },
      [&](int ith) { region.help(claims[ith], claims, n_threads); });
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
