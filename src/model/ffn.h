// Dense situ FFN (model.md §6.5): f = W_down situ(W_gate x, W_up x). The same MLP serves the
// shared experts of the MoE layers (§6.6 step 11).
#pragma once
#include <cstdint>

#include "model/hparams.h"
#include "model/ops.h"
#include "model/weights.h"

namespace k3::model {

// x: [T][ne0 of gate] -> out: [T][ne1 of down].
void situ_mlp(Ctx& ctx, const ops::Situ& situ, const Tensor& gate, const Tensor& up, const Tensor& down,
              const float* x, int64_t T, float* out);

// Layer il's dense FFN; x, out: [T][H].
void ffn_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t il, const float* x, int64_t T,
                 float* out);

}  // namespace k3::model
