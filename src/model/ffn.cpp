#include "model/ffn.h"

#include <vector>

namespace k3::model {

void situ_mlp(Ctx& ctx, const ops::Situ& situ, const Tensor& gate, const Tensor& up, const Tensor& down,
              const float* x, int64_t T, float* out) {
  const int64_t F = gate.ne[1];
  thread_local std::vector<float> a, b;  // scratch (ops.h); no lambda here
  scratch_zeros(a, T * F), scratch_zeros(b, T * F);
  linear(ctx, gate, x, T, a.data());
  linear(ctx, up, x, T, b.data());
  situ.apply(a.data(), b.data(), T * F);
  linear(ctx, down, a.data(), T, out);
}

void ffn_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t, const float* x, int64_t T,
                 float* out) {
  situ_mlp(ctx, ops::Situ(hp.situ_beta, hp.situ_linear_beta), w.ffn_gate, w.ffn_up, w.ffn_down, x, T, out);
}

}  // namespace k3::model
