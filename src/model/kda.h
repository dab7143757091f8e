// Kimi Delta Attention layer (model.md §6.3): q/k/v projections, causal depthwise conv + silu with
// its state, decay gate (lower-bound or softplus form), beta, l2-normalised q/k, the gated delta
// rule recurrence in F32, per-head RMS norm then full-rank sigmoid gate, output projection.
#pragma once
#include <cstdint>
#include <span>

#include "model/hparams.h"
#include "model/ops.h"
#include "model/state.h"
#include "model/weights.h"

namespace k3::model {

// x: [T][H] attention-normed input of the batch's T rows; out: [T][H]. Each segment's rows run
// through its sequence's conv and recurrence, updating that state to after its last token.
void kda_forward(Ctx& ctx, const HParams& hp, const LayerWeights& w, uint32_t il, std::span<const SegRows> segs,
                 const float* x, float* out);

// State::rewind in KdaJournal's Inputs mode: rec (every head's [d][d]) becomes the recorded state
// before the pass advanced by its first m of n tokens, with the very steps kda_forward ran.
void kda_replay(const KdaJournal& j, int64_t d, int64_t n, int64_t m, float* rec, ThreadPool& pool);

}  // namespace k3::model
