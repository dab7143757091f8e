#include "tensor/matmul_f32.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "common/error.h"
#include "tensor/gemm.h"
#include "tensor/kernels.h"
#include "tensor/scratch.h"

namespace k3 {

namespace {

// A work item multiplies kTokens activation rows (kept in L2) with bands of kRows weight rows,
// each band converted to float32 once per item (about 3 % of the item's arithmetic).
constexpr int64_t kRows = 32, kTokens = 64;

}  // namespace

void matmul_f32(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  const QuantKernels& k = kernels(w.type);
  const TypeInfo& ti = type_info(w.type);
  if (!k.to_float) fail("matmul_f32: weight type %s cannot be converted to float", ti.name);
  if (w.ne0 <= 0 || w.ne0 % ti.block != 0)
    fail("matmul_f32: %s weight with ne0 = %lld (must be a positive multiple of %lld)", ti.name,
         static_cast<long long>(w.ne0), static_cast<long long>(ti.block));
  if (n_tokens <= 0 || w.ne1 <= 0) return;
  const int64_t ne0 = w.ne0, ne1 = w.ne1;
  const bool f32 = w.type == GgmlType::F32;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  const size_t xs = static_cast<size_t>(ne0) * sizeof(float);

  const int64_t n_tb = (n_tokens + kTokens - 1) / kTokens;
  const int64_t n_bands = (ne1 + kRows - 1) / kRows;
  // Few token blocks (a small image): split the bands too, so every thread has work.
  const int64_t groups = std::clamp<int64_t>((4 * pool.size() + n_tb - 1) / n_tb, 1, n_bands);
  const int64_t bands_per_group = (n_bands + groups - 1) / groups;
  const int64_t n_items = n_tb * groups;
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    thread_local std::vector<float> band;
    if (!f32) scratch_size(band, static_cast<size_t>(kRows * ne0));
    for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) {
      const int64_t t0 = item / groups * kTokens, nt = std::min(kTokens, n_tokens - t0);
      const int64_t b0 = item % groups * bands_per_group, b1 = std::min(n_bands, b0 + bands_per_group);
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t r0 = b * kRows, nr = std::min(kRows, ne1 - r0);
        const void* wb = wdata + r0 * w.nb1;
        size_t ws = w.nb1;
        if (!f32) {
          for (int64_t r = 0; r < nr; ++r) k.to_float(wdata + (r0 + r) * w.nb1, band.data() + r * ne0, ne0);
          wb = band.data(), ws = xs;
        }
        gemm_rows(GgmlType::F32, ne0, wb, ws, nr, x + t0 * ne0, xs, nt, y + t0 * ne1 + r0, ne1);
      }
    }
  });
}

void matmul_f32_ref(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  const auto to_float = kernels(w.type, Isa::Scalar).to_float;
  std::vector<float> row(static_cast<size_t>(w.ne0));
  for (int64_t o = 0; o < w.ne1; ++o) {
    to_float(static_cast<const uint8_t*>(w.data) + o * w.nb1, row.data(), w.ne0);
    for (int64_t t = 0; t < n_tokens; ++t) {
      double s = 0;
      for (int64_t i = 0; i < w.ne0; ++i) s += static_cast<double>(row[i]) * x[t * w.ne0 + i];
      y[t * w.ne1 + o] = static_cast<float>(s);
    }
  }
}

}  // namespace k3
