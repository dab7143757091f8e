#include "tensor/matvec.h"

#include <xmmintrin.h>

#include <algorithm>

#include "common/error.h"
#include "tensor/kernels.h"

namespace k3 {

namespace {

// Weight bytes per work chunk: a short contiguous stream per claim (an atomic increment per
// ~6 us of streaming), and fine enough that a preempted thread's share is soon taken over.
constexpr size_t kChunkBytes = 64 * 1024;
// Groups per region (the chunk table lives on the stack); longer batches run as several regions.
constexpr size_t kMaxGroups = 64;

// Rows [r0, r1) of the products m[0..n), row by row (row r of each, then row r + 1), so that the n
// streams advance together and each stays prefetched. Kernels that do not prefetch themselves get
// the lines up to kDotPrefetchBytes past each row's end requested before its dot: rows are about a
// page long and the hardware prefetchers do not follow a stream across pages.
void rows(const Matvec* m, size_t n, int64_t r0, int64_t r1) {
  constexpr size_t kMaxStreams = 8;
  K3_ASSERT(n <= kMaxStreams);
  const QuantKernels* kw[kMaxStreams];
  uintptr_t pf[kMaxStreams];
  size_t wrow[kMaxStreams];
  for (size_t j = 0; j < n; ++j) {
    kw[j] = &kernels(m[j].w.type);
    wrow[j] = row_size(m[j].w.type, m[j].w.ne0);
    pf[j] = (reinterpret_cast<uintptr_t>(m[j].w.data) + r0 * m[j].w.nb1 + kDotPrefetchBytes) & ~uintptr_t{63};
  }
  for (int64_t r = r0; r < r1; ++r)
    for (size_t j = 0; j < n; ++j) {
      const uint8_t* row = static_cast<const uint8_t*>(m[j].w.data) + r * m[j].w.nb1;
      if (!kw[j]->dot_prefetches)
        for (const uintptr_t end = reinterpret_cast<uintptr_t>(row + wrow[j]) + kDotPrefetchBytes; pf[j] < end;
             pf[j] += 64)
          _mm_prefetch(reinterpret_cast<const char*>(pf[j]), _MM_HINT_T0);
      kw[j]->vec_dot(m[j].w.ne0, m[j].y + r, row, m[j].xq);
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
  size_t bytes = 0;
  first[0] = 0;
  for (size_t g = 0; g < n_groups; ++g) {
    size_t row_bytes = 0;
    for (size_t j = 0; j < group; ++j) row_bytes += mv[g * group + j].w.nb1;
    const int64_t ne1 = mv[g * group].w.ne1;
    bytes += row_bytes * static_cast<size_t>(ne1);
    int64_t rows_per = static_cast<int64_t>(kChunkBytes / std::max<size_t>(1, row_bytes));
    rows_per = std::max(row_align, rows_per / row_align * row_align);
    grain[g] = rows_per;
    first[g + 1] = first[g] + (ne1 + rows_per - 1) / rows_per;
  }
  auto chunk = [&](int64_t c) {
    const size_t g = static_cast<size_t>(std::upper_bound(first, first + n_groups + 1, c) - first - 1);
    const int64_t r0 = (c - first[g]) * grain[g], r1 = std::min(mv[g * group].w.ne1, r0 + grain[g]);
    rows(mv + g * group, group, r0, r1);
    if (then) (*then)(g, r0, r1);
  };
  if (bytes < kChunkBytes) {
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

}  // namespace k3
