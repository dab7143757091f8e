#include "model/ffn.h"

#include <vector>

namespace k3::model {

void situ_hidden(Ctx& ctx, const ops::Situ& situ, const Tensor& gate, const Tensor& up, const float* x, int64_t T,
                 float* a) {
  const int64_t F = gate.ne[1];
  thread_local std::vector<float> b;  // scratch (ops.h); no lambda here
  scratch_zeros(b, T * F);
  const LinearJob jobs[] = {{gate, x, a}, {up, x, b.data()}};  // one region at T = 1
  linear_batch(ctx, jobs, 2, T);
  situ_rows(ctx, situ, a, b.data(), T, F);
}

void situ_rows(Ctx& ctx, const ops::Situ& situ, float* a, const float* b, int64_t T, int64_t F) {
  par_for(ctx, T, 16 * F, [&](int64_t t0, int64_t t1) { situ.apply(a + t0 * F, b + t0 * F, (t1 - t0) * F); });
}

void ffn_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t, const float* x, int64_t T,
                 float* out) {
  // F of the F_all hidden rows and H_out of the H outputs are this process's (all of them alone).
  const int64_t F = w.ffn_gate.ne[1], F_all = w.ffn_down.ne[0], H = hp.n_embd, H_out = w.ffn_down.ne[1];
  thread_local std::vector<float> a;
  thread_local std::vector<uint8_t> aq;
  scratch_zeros(a, T * F_all);
  situ_hidden(ctx, ops::Situ(hp.situ_beta, hp.situ_linear_beta), w.ffn_gate, w.ffn_up, x, T, a.data());
  linear_gathered(ctx, w.ffn_down, a.data(), F, F_all, 1, T, out, aq);
  gather(ctx, {{out, H_out, H}}, T);
}

}  // namespace k3::model
