// One token of the KDA gated delta rule for one head (model.md §6.3 step 6), written with fixed
// SIMD-width partial sums so that the compiler vectorises it. The same function serves every
// batch size, so prefill and token-by-token decode give the same bits.
#pragma once
#include <cstdint>

namespace k3::model {

// S: d×d state, row j (value channel j) holds S[i][j] over key channel i. For each j:
// S_j ← S_j ⊙ eg;  u = S_j·k;  S_j ← S_j + k·β(v_j − u);  o_j = scale · (S_j·q).
// The inner products are summed in kKdaLanes interleaved partial sums (element i into lane
// i mod kKdaLanes), combined pairwise; against a sequential sum that reorders the float additions
// only (a relative difference of a few ulp per product term; tests/model bound it).
constexpr int kKdaLanes = 16;
void kda_token(float* S, int64_t d, const float* q, const float* k, const float* eg, const float* v, float beta,
               float scale, float* o);

}  // namespace k3::model
