#include "tensor/matmul.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "common/error.h"
#include "tensor/gemm.h"
#include "tensor/scratch.h"
#include "tensor/kernels.h"
#include "tensor/matvec.h"

namespace k3 {

namespace {

// Weight bytes one work item of a multi-token product covers: they stay in L2 while every
// token's activation row is multiplied against them.
constexpr size_t kTileWeightBytes = 256 * 1024;
// Activation rows multiplied against one weight row before moving on (they stay in L1/L2).
constexpr int64_t kTileTokens = 16;

}  // namespace

void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  const QuantKernels& kw = kernels(w.type);
  const TypeInfo& ti = type_info(w.type);
  if (!kw.vec_dot) fail("matmul: no dot product for weight type %s", ti.name);
  const GgmlType vt = kw.vec_dot_type;
  const int64_t block = std::max(ti.block, type_info(vt).block);
  if (w.ne0 <= 0 || w.ne0 % block != 0)
    fail("matmul: %s weight with ne0 = %lld (must be a positive multiple of %lld)", ti.name,
         static_cast<long long>(w.ne0), static_cast<long long>(block));
  if (w.nb1 < row_size(w.type, w.ne0)) fail("matmul: row stride %zu below the row size", w.nb1);
  if (n_tokens <= 0 || w.ne1 <= 0) return;

  const int64_t ne0 = w.ne0, ne1 = w.ne1;
  const size_t xrow = row_size(vt, ne0);
  const uint8_t* xq = reinterpret_cast<const uint8_t*>(x);
  // Activations in the weight's partner format, once per call (the caller's thread owns it).
  thread_local std::vector<uint8_t> scratch;
  if (vt != GgmlType::F32) {
    scratch_size(scratch, static_cast<size_t>(n_tokens) * xrow);
    const auto from_float = kernels(vt).from_float;
    uint8_t* q = scratch.data();
    auto quantize = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) from_float(x + t * ne0, q + t * xrow, ne0);
    };
    if (n_tokens == 1) quantize(0, 1);
    else pool.parallel_for(n_tokens, quantize);
    xq = q;
  }

  const auto vec_dot = kw.vec_dot;
  const auto* wdata = static_cast<const uint8_t*>(w.data);
  if (n_tokens == 1) {
    const Matvec mv{w, xq, y};
    matvec_batch(&mv, 1, 1, pool);
    return;
  }

  // Register-tiled kernels where the ISA has them (bit-identical to vec_dot); their activation
  // rows are packed once, shared by all threads. Packing is on the calling thread: it costs well
  // under 1 % of the product, less than another fork/join when a worker is preempted.
  const GemmKernel* gk = gemm_kernel(w.type, active_isa());
  size_t xstride = xrow;
  if (gk && gk->packed_size(ne0) > 0) {
    xstride = gk->packed_size(ne0);
    thread_local std::vector<uint8_t> packed;
    scratch_size(packed, static_cast<size_t>(n_tokens) * xstride);
    for (int64_t t = 0; t < n_tokens; ++t) gk->pack(xq + t * xrow, packed.data() + t * xstride, ne0);
    xq = packed.data();
  }

  // Tokens x rows: work items are blocks of rows, handed out dynamically; within one, each weight
  // row is reused for kTileTokens activation rows at a time.
  const int64_t rows_fit = std::max<int64_t>(1, kTileWeightBytes / std::max<size_t>(1, w.nb1));
  const int64_t rows_balance = std::max<int64_t>(1, ne1 / (4 * pool.size()));
  const int64_t rb = std::min(rows_fit, rows_balance);
  const int64_t n_items = (ne1 + rb - 1) / rb;
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) {
      const int64_t r0 = item * rb, r1 = std::min(ne1, r0 + rb);
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kTileTokens) {
        const int64_t t1 = std::min(n_tokens, t0 + kTileTokens);
        if (gk) {
          gk->run(ne0, wdata + r0 * w.nb1, w.nb1, r1 - r0, xq + t0 * xstride, xstride, t1 - t0, y + t0 * ne1 + r0, ne1);
          continue;
        }
        for (int64_t r = r0; r < r1; ++r) {
          const uint8_t* wr = wdata + r * w.nb1;
          for (int64_t t = t0; t < t1; ++t) vec_dot(ne0, y + t * ne1 + r, wr, xq + t * xrow);
        }
      }
    }
  });
}

}  // namespace k3
