#include "tensor/matmul_f32.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "common/error.h"
#include "tensor/sgemm.h"
#include "tensor/kernels.h"
#include "tensor/scratch.h"

namespace k3 {

namespace {

// Weight rows per work item: turned into float32 sgemm panels once, then multiplied with every
// activation tile of the item's token range (the conversion is ~2 % of the arithmetic).
constexpr int64_t kBandRows = 128;

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
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  const Sgemm& g = sgemm_kernel();
  const int64_t MR = g.mr, NR = g.nr;

  // The activations packed into sgemm tiles once, shared by every item.
  thread_local std::vector<float> packed;  // the caller's; the workers use it through xp
  scratch_size(packed, g.packed_size(n_tokens, ne0));
  float* const xp = packed.data();
  const int64_t n_tiles = (n_tokens + MR - 1) / MR;
  pool.parallel_for(n_tiles, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) g.pack_a(std::min(MR, n_tokens - t * MR), ne0, x + t * MR * ne0, ne0, xp + t * MR * ne0);
  });

  // Items: a band of weight rows x a range of tiles; few bands (a small matrix): split the tokens.
  const int64_t n_bands = (ne1 + kBandRows - 1) / kBandRows;
  const int64_t chunks = std::clamp<int64_t>((4 * pool.size() + n_bands - 1) / n_bands, 1, n_tiles);
  const int64_t per_chunk = (n_tiles + chunks - 1) / chunks;
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    thread_local std::vector<float> row, panels;
    scratch_size(row, static_cast<size_t>(ne0));
    scratch_size(panels, static_cast<size_t>((kBandRows + NR - 1) / NR * NR * ne0));
    for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < n_bands * chunks;) {
      const int64_t r0 = item / chunks * kBandRows, nr = std::min(kBandRows, ne1 - r0);
      const int64_t tile0 = item % chunks * per_chunk, tile1 = std::min(n_tiles, tile0 + per_chunk);
      if (tile0 >= tile1) continue;
      // weight row r -> column r % NR of panel r / NR, each panel [ne0][NR]
      for (int64_t r = 0; r < nr; ++r) {
        k.to_float(wdata + (r0 + r) * w.nb1, row.data(), ne0);
        float* p = panels.data() + r / NR * NR * ne0 + r % NR;
        for (int64_t i = 0; i < ne0; ++i) p[i * NR] = row[i];
      }
      for (int64_t t = tile0; t < tile1; ++t) {
        const int64_t mr = std::min(MR, n_tokens - t * MR);
        for (int64_t q = 0; q * NR < nr; ++q)
          g.tile(mr, std::min(NR, nr - q * NR), ne0, xp + t * MR * ne0, panels.data() + q * NR * ne0,
                 y + t * MR * ne1 + r0 + q * NR, ne1, false);
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
