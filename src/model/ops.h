// Primitive operations of model.md §5, with llama.cpp's evaluation order (§9), and the matrix
// product used by every block (activation rounding as llama.cpp's CPU backend does it).
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/group.h"
#include "model/weights.h"
#include "tensor/scratch.h"
#include "tensor/threadpool.h"

namespace k3::model {

class Trace;
class ExpertSource;

// How F16 2-D weights are multiplied (model.md §9, quant-formats.md §10). Round: the activation
// is rounded to F16 (llama.cpp's plain CPU path). Amx: weights with ne1 % 32 == 0 and
// ne0 % 16 == 0 are multiplied against the unrounded F32 activation, as llama.cpp does when its
// CPU backend places them in the AMX buffer.
enum class F16Rule : uint8_t { Round, Amx };
// K3_F16_RULE=round|amx overrides; the default follows the CPU like llama.cpp: Amx when CPUID
// reports AMX-INT8 and AVX512-VNNI, else Round (see docs/model.md).
F16Rule default_f16_rule();

// What every block needs besides weights and state: threads, policies, optional trace.
// Sees the input of every matrix product (importance-matrix collection, activation statistics).
class MatmulObserver {
 public:
  virtual ~MatmulObserver() = default;
  // Before y = W x: w is the 2-D weight (for a 3-D stack, one expert or head: w.data points into the
  // mapped tensor), x holds T rows of w.ne0 floats.
  virtual void on_matmul(const WeightView& w, const float* x, int64_t T) = 0;
};

// Scratch. A block keeps its temporaries in a thread_local struct, sized on every call by
// scratch_zeros() (tensor/scratch.h: capacity kept, so steady decoding allocates nothing; prompt-
// sized buffers given back). The block names them through local references: a lambda run by a
// pool worker that named the thread_local itself would get the worker's own, empty copy.
struct Ctx {
  ThreadPool& pool;
  F16Rule f16_rule = F16Rule::Round;
  Trace* trace = nullptr;
  MatmulObserver* observer = nullptr;
  ExpertSource* experts = nullptr;  // null: routed experts from the mapping (expert_source.h)
  Group* group = nullptr;           // the other processes of a multi-process run (group.h); null: alone
};

// A block's outputs computed in slices (this process's share of a weight's rows, cut by the
// loader) put back together: each part holds [T][local] values on entry, [T][full] on return
// (group.h). Alone, local == full and nothing moves.
void gather(Ctx& ctx, std::span<const Slice> parts, int64_t T);
inline void gather(Ctx& ctx, std::initializer_list<Slice> parts, int64_t T) {
  gather(ctx, std::span<const Slice>(parts.begin(), parts.size()), T);
}

// fn(begin, end) over [0, n) on the pool, or inline when n * cost (rough flops) is too small for
// the fork/join to pay off. Results never depend on the split.
void par_for(Ctx& ctx, int64_t n, int64_t cost, FnRef<void(int64_t, int64_t)> fn);
// ops::rmsnorm_rows over T rows of n, the rows split over ctx's threads; y may alias x.
void norm_rows(Ctx& ctx, const float* x, const float* w, float* y, int64_t T, int64_t n, float eps);

// y[T][ne1] = W x for T tokens (x is [T][ne0]). whole_rows: the rows of the weight w is a share
// of (the F16 rule looks at the whole shape; 0: w.ne1).
void linear(Ctx& ctx, const WeightView& w, const float* x, int64_t T, float* y, int64_t whole_rows = 0);
inline void linear(Ctx& ctx, const Tensor& w, const float* x, int64_t T, float* y) {
  linear(ctx, w.mat(), x, T, y, w.whole_rows());
}

// The format linear() converts w's input to for one token: its vec_dot_type, or F32 (F32 weights,
// and F16 weights under the AMX rule, which are multiplied against the floats).
GgmlType input_format(const Ctx& ctx, const WeightView& w, int64_t whole_rows);

// The input x of a product with w that a block computed in slices (`local` of `full` values per
// row here, in units of `unit`; x has room for T rows of full). part() is what gather() exchanges:
// the floats, or this process's slice converted into q in the format the product takes
// (exchange_format: one token, whole blocks); product(y) is then y = W x, with the same bits.
class GatheredInput {
 public:
  GatheredInput(Ctx& ctx, const Tensor& w, float* x, int64_t local, int64_t full, int64_t unit, int64_t T,
                std::vector<uint8_t>& q);
  const Slice& part() const { return part_; }
  void product(float* y) const;

 private:
  Ctx& ctx_;
  const Tensor& w_;
  float* x_;
  int64_t T_;
  Slice part_;
};
// y = W x of an input computed in slices: gathered (in one exchange of its own), then multiplied.
void linear_gathered(Ctx& ctx, const Tensor& w, float* x, int64_t local, int64_t full, int64_t unit, int64_t T,
                     float* y, std::vector<uint8_t>& q);

// Several products y = W x of T tokens each, in one parallel region (matmul_batch: each distinct
// input quantized once), which pays where they are small: a decode step, a verify pass, per-head
// products. Same bits as linear() each.
struct LinearJob {
  WeightView w;
  const float* x;
  float* y;
  int64_t whole_rows = 0;  // as for linear()
  LinearJob() = default;
  LinearJob(const WeightView& w, const float* x, float* y, int64_t whole_rows = 0)
      : w(w), x(x), y(y), whole_rows(whole_rows) {}
  LinearJob(const Tensor& t, const float* x, float* y) : LinearJob(t.mat(), x, y, t.whole_rows()) {}
};
void linear_batch(Ctx& ctx, const LinearJob* jobs, size_t n, int64_t T);
// The same, and then(job, r0, r1) when rows [r0, r1) of jobs[job].y are final (matmul_batch).
void linear_batch(Ctx& ctx, const LinearJob* jobs, size_t n, int64_t T, RowsReady then);

namespace ops {

inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
inline float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

// situ(a, b) (model.md §5) with the float reciprocals; the scalar form, in llama.cpp's order, is
// vecmath's reference (src/tensor/vecmath.cpp).
struct Situ {
  float beta, inv_beta, lambda, inv_lambda;
  Situ(float b, float l) : beta(b), inv_beta(1.0f / b), lambda(l), inv_lambda(l > 0 ? 1.0f / l : 0.0f) {}
  // a[i] = situ(a[i], b[i]) for i < n with the active ISA's vecmath (the scalar form under
  // K3_ISA=scalar, a few ulp from it otherwise).
  void apply(float* a, const float* b, int64_t n) const;
};
// In place over n values, vectorised like Situ::apply.
void sigmoid_n(float* x, int64_t n);
void silu_n(float* x, int64_t n);
void exp_n(float* x, int64_t n);

// c = 1 / sqrtf((float)(sum x^2 / n) + eps), the sum in double.
float rms_scale(const float* x, int64_t n, float eps);
// y = x * c (unweighted), y may alias x.
void rmsnorm(const float* x, float* y, int64_t n, float eps);
// y = (x * c) * w, two separate float multiplications; y may alias x.
void rmsnorm_mul(const float* x, const float* w, float* y, int64_t n, float eps);
// Rows: T rows of n, each normed with gain w.
void rmsnorm_rows(const float* x, const float* w, float* y, int64_t T, int64_t n, float eps);
// In-place softmax in llama.cpp's order (VecMath::softmax): of a row it pads with masked entries
// (attention over the KV cache) with masked_row.
void softmax(float* z, int64_t n, bool masked_row = false);

}  // namespace ops
}  // namespace k3::model
