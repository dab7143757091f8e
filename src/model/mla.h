// Multi-head latent attention layer (model.md §6.4), absorbed form, NoPE, gated: q-LoRA (or a
// plain q projection), kv latent + un-rotated pe part appended to the per-sequence latent cache,
// k_b absorbed into the query and v_b applied to the latent read-out as per-head matrix
// products, causal softmax attention, sigmoid output gate, output projection.
#pragma once
#include <cstdint>

#include "model/hparams.h"
#include "model/ops.h"
#include "model/state.h"
#include "model/weights.h"

namespace k3::model {

// x: [T][H] attention-normed input of the tokens at positions n_past .. n_past+T-1; out: [T][H].
// Appends T rows to st.kv first; token t attends to cached rows 0 .. n_past+t.
void mla_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t il, LayerState& st, int64_t n_past,
                 const float* x, int64_t T, float* out);

}  // namespace k3::model
