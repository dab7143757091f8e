#include "model/ops.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "common/error.h"
#include "tensor/fp16.h"
#include "tensor/kernels.h"
#include "tensor/matvec.h"
#include "tensor/vecmath.h"

namespace k3::model {

F16Rule default_f16_rule() {
  if (const char* e = std::getenv("K3_F16_RULE")) {
    if (!std::strcmp(e, "amx")) return F16Rule::Amx;
    if (!std::strcmp(e, "round")) return F16Rule::Round;
    fail("K3_F16_RULE=%s: expected 'amx' or 'round'", e);
  }
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  // llama.cpp's AMX buffer needs AMX-INT8 (leaf 7 EDX bit 25) and AVX512-VNNI (leaf 7 ECX bit 11).
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 25)) && (c & (1u << 11))) return F16Rule::Amx;
#endif
  return F16Rule::Round;
}

void par_for(Ctx& ctx, int64_t n, int64_t cost, FnRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  if (ctx.pool.size() == 1 || n == 1 || n * cost < (1 << 16)) {
    fn(0, n);
    return;
  }
  ctx.pool.parallel_for(n, fn);
}

void norm_rows(Ctx& ctx, const float* x, const float* w, float* y, int64_t T, int64_t n, float eps) {
  par_for(ctx, T, 4 * n, [&](int64_t t0, int64_t t1) { ops::rmsnorm_rows(x + t0 * n, w, y + t0 * n, t1 - t0, n, eps); });
}

// The AMX buffer's F16 product: unrounded activations, llama.cpp's summation order (kernels.h).
static void linear_f16_as_f32(Ctx& ctx, const WeightView& w, const float* x, int64_t T, float* y) {
  const auto dot = kernels(GgmlType::F16).dot_f16_f32_amx;
  par_for(ctx, w.ne1, w.ne0 * T, [&](int64_t r0, int64_t r1) {
    for (int64_t o = r0; o < r1; ++o) {
      const void* row = static_cast<const uint8_t*>(w.data) + o * w.nb1;
      for (int64_t t = 0; t < T; ++t) dot(w.ne0, &y[t * w.ne1 + o], row, x + t * w.ne0);
    }
  });
}

void gather(Ctx& ctx, std::span<const Slice> parts, int64_t T) {
  if (ctx.group) return ctx.group->gather(parts, T);
  for (const Slice& s : parts) K3_ASSERT(s.local == s.full);
}

static bool amx_rule(const Ctx& ctx, const WeightView& w, int64_t whole_rows) {
  const int64_t rows = whole_rows > 0 ? whole_rows : w.ne1;
  return w.type == GgmlType::F16 && ctx.f16_rule == F16Rule::Amx && rows % 32 == 0 && w.ne0 % 16 == 0;
}

void linear(Ctx& ctx, const WeightView& w, const float* x, int64_t T, float* y, int64_t whole_rows) {
  if (T <= 0) return;
  if (ctx.observer) ctx.observer->on_matmul(w, x, T);
  if (amx_rule(ctx, w, whole_rows)) {
    linear_f16_as_f32(ctx, w, x, T, y);
    return;
  }
  matmul(w, x, T, y, ctx.pool);
}

GgmlType input_format(const Ctx& ctx, const WeightView& w, int64_t whole_rows) {
  return amx_rule(ctx, w, whole_rows) ? GgmlType::F32 : kernels(w.type).vec_dot_type;
}

GatheredInput::GatheredInput(Ctx& ctx, const Tensor& w, float* x, int64_t local, int64_t full, int64_t unit,
                             int64_t T, std::vector<uint8_t>& q)
    : ctx_(ctx), w_(w), x_(x), T_(T), part_{x, local, full, unit} {
  if (!ctx.group || ctx.observer) return;  // alone nothing moves; an observer sees the floats
  part_.type = exchange_format(input_format(ctx, w.mat(), w.whole_rows()), full, unit,
                               ctx.group->placement().tp_size, T);
  if (part_.type == GgmlType::F32) return;
  scratch_size(q, row_size(part_.type, full));
  kernels(part_.type).from_float(x, q.data(), local);
  part_.data = q.data();
}

void GatheredInput::product(float* y) const {
  if (part_.type == GgmlType::F32) return linear(ctx_, w_, x_, T_, y);
  const Matvec mv{w_.mat(), part_.data, y};  // linear()'s one-token product on its converted input
  matvec_batch(&mv, 1, 1, ctx_.pool);
}

void linear_gathered(Ctx& ctx, const Tensor& w, float* x, int64_t local, int64_t full, int64_t unit, int64_t T,
                     float* y, std::vector<uint8_t>& q) {
  const GatheredInput in(ctx, w, x, local, full, unit, T, q);
  gather(ctx, {in.part()}, T);
  in.product(y);
}

static void batch(Ctx& ctx, const LinearJob* jobs, size_t n, int64_t T, const RowsReady* then) {
  bool amx = false;
  for (size_t i = 0; i < n; ++i) amx |= jobs[i].w.type == GgmlType::F16 && ctx.f16_rule == F16Rule::Amx;
  if (amx) {  // (the rule may apply to some: each its own way)
    for (size_t i = 0; i < n; ++i) {
      linear(ctx, jobs[i].w, jobs[i].x, T, jobs[i].y, jobs[i].whole_rows);
      if (then && jobs[i].w.ne1 > 0) (*then)(i, 0, jobs[i].w.ne1);
    }
    return;
  }
  thread_local std::vector<MatmulJob> mj;
  mj.clear();
  for (size_t i = 0; i < n; ++i) {
    if (ctx.observer) ctx.observer->on_matmul(jobs[i].w, jobs[i].x, T);
    mj.push_back({jobs[i].w, jobs[i].x, jobs[i].y});
  }
  if (then) matmul_batch(mj.data(), mj.size(), T, ctx.pool, *then);
  else matmul_batch(mj.data(), mj.size(), T, ctx.pool);
}

void linear_batch(Ctx& ctx, const LinearJob* jobs, size_t n, int64_t T) { batch(ctx, jobs, n, T, nullptr); }

void linear_batch(Ctx& ctx, const LinearJob* jobs, size_t n, int64_t T, RowsReady then) {
  batch(ctx, jobs, n, T, &then);
}

namespace ops {

void Situ::apply(float* a, const float* b, int64_t n) const {
  if (n > 0) vecmath().situ(a, b, n, SituParams{beta, inv_beta, lambda, inv_lambda});
}
void sigmoid_n(float* x, int64_t n) {
  if (n > 0) vecmath().sigmoid(x, n);
}
void silu_n(float* x, int64_t n) {
  if (n > 0) vecmath().silu(x, n);
}
void exp_n(float* x, int64_t n) {
  if (n > 0) vecmath().exp(x, n);
}

float rms_scale(const float* x, int64_t n, float eps) {
  double s = 0.0;  // each square rounded to float, then summed in double: llama.cpp's rms_norm
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(s / n);
  return 1.0f / sqrtf(mean + eps);
}

void rmsnorm(const float* x, float* y, int64_t n, float eps) {
  const float c = rms_scale(x, n, eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * c;
}

void rmsnorm_mul(const float* x, const float* w, float* y, int64_t n, float eps) {
  const float c = rms_scale(x, n, eps);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] * c;
    y[i] = v * w[i];
  }
}

void rmsnorm_rows(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps) {
  for (int64_t t = 0; t < T; ++t) rmsnorm_mul(x + t * n, w, y + t * n, n, eps);
}

void softmax(float* z, int64_t n, bool masked_row) { vecmath().softmax(z, n, masked_row); }

}  // namespace ops
}  // namespace k3::model
