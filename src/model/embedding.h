// Token embedding (model.md §6.1): x0 = token_embd[token], dequantized, no scaling.
#pragma once
#include <cstdint>

#include "model/weights.h"

namespace k3::model {

// x: [T][H]. Ids must already be checked against the vocabulary. Only the rows of the ids this
// process holds (token_embd cut by vocabulary rows) are written.
void embed(const Tensor& token_embd, const int32_t* ids, int64_t T, float* x);

}  // namespace k3::model
