// Latent MoE layer (model.md §6.6): router on the full-width input (sigmoid or softmax), biased
// top-k selection, renormalised unbiased weights, down to the latent, routed experts with situ in
// the latent space (3-D stacks, expert e at byte offset e*ne1*row_size), weighted combine in
// selection order, latent RMS norm, up-projection, plus the shared experts at full width.
#pragma once
#include <cstdint>

#include "model/hparams.h"
#include "model/ops.h"
#include "model/weights.h"

namespace k3::model {

// x: [T][H] FFN-normed input; out: [T][H].
void moe_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t il, const float* x, int64_t T,
                 float* out);

}  // namespace k3::model
