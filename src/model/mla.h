// Multi-head latent attention layer (model.md §6.4), absorbed form, NoPE, gated: q-LoRA (or a
// plain q projection), kv latent + un-rotated pe part appended to the per-sequence latent cache,
// k_b absorbed into the query and v_b applied to the latent read-out as per-head matrix
// products, causal softmax attention, sigmoid output gate, output projection.
#pragma once
#include <cstdint>
#include <span>

#include "model/hparams.h"
#include "model/ops.h"
#include "model/state.h"
#include "model/weights.h"

namespace k3::model {

// x: [T][H] attention-normed input of the batch's T rows; out: [T][H]. Each segment's rows are
// appended to its sequence's latent cache first; its token t attends to cached rows 0 .. n_past+t.
void mla_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t il, std::span<const SegRows> segs,
                 const float* x, float* out);

}  // namespace k3::model
