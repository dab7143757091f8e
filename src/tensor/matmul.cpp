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
// Activation rows multiplied against one weight row before moving on (they stay in L1/L2), unless
// the kernel asks for more (GemmKernel::tokens).
constexpr int64_t kTileTokens = 16;
// Up to this many tokens (a decode step, the rows of a verify pass) a product streams its weights
// once as decode does (matvec_batch: long prefetched chunks, every product in one region), each
// weight row against all the tokens.
constexpr int64_t kFewTokens = 8;

}  // namespace

void matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  const MatmulJob job{w, x, y};
  matmul_batch(&job, 1, n_tokens, pool);
}

namespace {

void batch(const MatmulJob* jobs, size_t n, int64_t n_tokens, ThreadPool& pool, const RowsReady* then) {
  if (n_tokens <= 0) return;
  // Per job: its activations in the weight's partner format (shared with an earlier job of the
  // same input and format), packed for the tiles where they need it.
  struct Prep {
    const uint8_t* q = nullptr;   // the activations in the partner format
    const uint8_t* xq = nullptr;  // what the kernel reads: q, or q packed
    size_t xstride = 0;
    const GemmKernel* gk = nullptr;
    int64_t rb = 0;  // rows a work item covers
    int64_t tile_tokens = kTileTokens;
  };
  // Scratch kept per calling thread; the workers reach it through these references (naming the
  // thread_locals in the region would give each worker its own, empty, copy).
  thread_local std::vector<std::vector<uint8_t>> t_quant, t_packed;
  thread_local std::vector<Prep> t_prep;
  thread_local std::vector<std::pair<size_t, int64_t>> t_items;  // (job, first row)
  auto &quant = t_quant, &packed = t_packed;
  auto& prep = t_prep;
  auto& items = t_items;
  if (quant.size() < n) quant.resize(n), packed.resize(n);
  prep.assign(n, Prep{});
  items.clear();
  for (size_t i = 0; i < n; ++i) {
    const WeightView& w = jobs[i].w;
    const QuantKernels& kw = kernels(w.type);
    const TypeInfo& ti = type_info(w.type);
    if (!kw.vec_dot) fail("matmul: no dot product for weight type %s", ti.name);
    const GgmlType vt = kw.vec_dot_type;
    const int64_t block = std::max(ti.block, type_info(vt).block);
    if (w.ne0 <= 0 || w.ne0 % block != 0)
      fail("matmul: %s weight with ne0 = %lld (must be a positive multiple of %lld)", ti.name,
           static_cast<long long>(w.ne0), static_cast<long long>(block));
    if (w.nb1 < row_size(w.type, w.ne0)) fail("matmul: row stride %zu below the row size", w.nb1);
    if (w.ne1 <= 0) continue;
    const size_t xrow = row_size(vt, w.ne0);
    Prep& p = prep[i];
    p.xstride = xrow;
    if (vt == GgmlType::F32) p.q = reinterpret_cast<const uint8_t*>(jobs[i].x);
    for (size_t j = 0; j < i && !p.q; ++j)
      if (jobs[j].x == jobs[i].x && kernels(jobs[j].w.type).vec_dot_type == vt) p.q = prep[j].q;
    if (!p.q) {
      scratch_size(quant[i], static_cast<size_t>(n_tokens) * xrow);
      const auto from_float = kernels(vt).from_float;
      uint8_t* q = quant[i].data();
      const float* x = jobs[i].x;
      auto quantize = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) from_float(x + t * w.ne0, q + t * xrow, w.ne0);
      };
      if (n_tokens <= kFewTokens) quantize(0, n_tokens);
      else pool.parallel_for(n_tokens, quantize);
      p.q = q;
    }
    p.xq = p.q;
    if (n_tokens <= kFewTokens) continue;
    // Register-tiled kernels where the ISA has them (bit-identical to vec_dot); their activation
    // rows are packed once, shared by all threads. Packing is on the calling thread: it costs well
    // under 1 % of the product, less than another fork/join when a worker is preempted.
    p.gk = gemm_kernel(w.type, active_isa());
    if (p.gk && p.gk->packed_size(w.ne0) > 0) {
      p.xstride = p.gk->packed_size(w.ne0);
      scratch_size(packed[i], static_cast<size_t>(n_tokens) * p.xstride);
      for (int64_t t = 0; t < n_tokens; ++t) p.gk->pack(p.q + t * xrow, packed[i].data() + t * p.xstride, w.ne0);
      p.xq = packed[i].data();
    }
    if (p.gk && p.gk->tokens > 0) p.tile_tokens = p.gk->tokens;
    // Tokens x rows: work items are blocks of rows, handed out dynamically; within one, each
    // weight row is reused for tile_tokens activation rows at a time.
    const int64_t rows_fit = std::max<int64_t>(1, kTileWeightBytes / std::max<size_t>(1, w.nb1));
    const int64_t rows_balance = std::max<int64_t>(1, w.ne1 / (4 * pool.size()));
    p.rb = std::min(rows_fit, rows_balance);
    for (int64_t r = 0; r < w.ne1; r += p.rb) items.emplace_back(i, r);
  }
  if (n_tokens <= kFewTokens) {
    thread_local std::vector<Matvec> t_mv;
    thread_local std::vector<size_t> t_job;  // the job of each product
    std::vector<Matvec>& mv = t_mv;
    std::vector<size_t>& job = t_job;
    mv.clear(), job.clear();
    for (size_t i = 0; i < n; ++i)
      if (jobs[i].w.ne1 > 0) {
        mv.push_back({jobs[i].w, prep[i].xq, jobs[i].y, n_tokens, prep[i].xstride, jobs[i].w.ne1});
        job.push_back(i);
      }
    if (!then) return matvec_batch(mv.data(), mv.size(), 1, pool);
    matvec_batch(mv.data(), mv.size(), 1, pool, 1, [&](size_t g, int64_t r0, int64_t r1) { (*then)(job[g], r0, r1); });
    return;
  }
  const int64_t n_items = static_cast<int64_t>(items.size());
  std::atomic<int64_t> next{0};
  pool.run([&](int, int) {
    for (int64_t item; (item = next.fetch_add(1, std::memory_order_relaxed)) < n_items;) {
      const auto [i, r0] = items[item];
      const WeightView& w = jobs[i].w;
      const Prep& p = prep[i];
      const int64_t r1 = std::min(w.ne1, r0 + p.rb);
      const auto* wdata = static_cast<const uint8_t*>(w.data);
      float* y = jobs[i].y;
      for (int64_t t0 = 0; t0 < n_tokens; t0 += p.tile_tokens) {
        const int64_t t1 = std::min(n_tokens, t0 + p.tile_tokens);
        if (p.gk) {
          p.gk->run(w.ne0, wdata + r0 * w.nb1, w.nb1, r1 - r0, p.xq + t0 * p.xstride, p.xstride, t1 - t0,
                    y + t0 * w.ne1 + r0, w.ne1);
          continue;
        }
        const auto vec_dot = kernels(w.type).vec_dot;
        for (int64_t r = r0; r < r1; ++r) {
          const uint8_t* wr = wdata + r * w.nb1;
          for (int64_t t = t0; t < t1; ++t) vec_dot(w.ne0, y + t * w.ne1 + r, wr, p.xq + t * p.xstride);
        }
      }
    }
  });
  if (then)
    for (size_t i = 0; i < n; ++i)
      if (jobs[i].w.ne1 > 0) (*then)(i, 0, jobs[i].w.ne1);
}

}  // namespace

void matmul_batch(const MatmulJob* jobs, size_t n, int64_t n_tokens, ThreadPool& pool) {
  batch(jobs, n, n_tokens, pool, nullptr);
}

void matmul_batch(const MatmulJob* jobs, size_t n, int64_t n_tokens, ThreadPool& pool, RowsReady then) {
  batch(jobs, n, n_tokens, pool, &then);
}

}  // namespace k3
