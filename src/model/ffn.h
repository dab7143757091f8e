// Dense situ FFN (model.md §6.5): f = W_down situ(W_gate x, W_up x). Its hidden layer also serves
// the shared experts of the MoE layers (§6.6 step 11).
#pragma once
#include <cstdint>

#include "model/hparams.h"
#include "model/ops.h"
#include "model/weights.h"

namespace k3::model {

// a[T][F] = situ(W_gate x, W_up x) over the F rows of gate and up this process holds; x: [T][ne0].
void situ_hidden(Ctx& ctx, const ops::Situ& situ, const Tensor& gate, const Tensor& up, const float* x, int64_t T,
                 float* a);
// a[t][i] = situ(a[t][i], b[t][i]) for T rows of F, the rows split over ctx's threads.
void situ_rows(Ctx& ctx, const ops::Situ& situ, float* a, const float* b, int64_t T, int64_t F);

// Layer il's dense FFN; x, out: [T][H].
void ffn_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t il, const float* x, int64_t T,
                 float* out);

}  // namespace k3::model
