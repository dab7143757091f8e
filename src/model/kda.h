// Kimi Delta Attention layer (model.md §6.3): q/k/v projections, causal depthwise conv + silu with
// its state, decay gate (lower-bound or softplus form), beta, l2-normalised q/k, the gated delta
// rule recurrence in F32, per-head RMS norm then full-rank sigmoid gate, output projection.
#pragma once
#include <cstdint>

#include "model/hparams.h"
#include "model/ops.h"
#include "model/state.h"
#include "model/weights.h"

namespace k3::model {

// x: [T][H] attention-normed input of T consecutive tokens; out: [T][H]. Updates st.conv and
// st.rec to the state after the last token.
void kda_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t il, LayerState& st, const float* x,
                 int64_t T, float* out);

}  // namespace k3::model
