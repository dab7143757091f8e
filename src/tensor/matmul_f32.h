// Matrix products in float32 arithmetic for weights of any type: the weights are turned into
// float32 a band of rows at a time (exactly, by the type's to_float) and multiplied with the
// unrounded float32 activations by sgemm (sgemm.h). Unlike matmul(), the activations
// are never converted to a vec_dot_type, so a BF16 or quantized weight gives the float32 product
// of its stored values (what the vision encoder's reference computes, vision.md §5).
#pragma once
#include <cstdint>

#include "tensor/matmul.h"
#include "tensor/threadpool.h"

namespace k3 {

// y[t][o] = sum_i W[o][i] * x[t][i] for t < n_tokens; x is [n_tokens][ne0], y is [n_tokens][ne1].
void matmul_f32(const WeightView& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// The plain reference: one double-precision sum per output.
void matmul_f32_ref(const WeightView& w, const float* x, int64_t n_tokens, float* y);

}  // namespace k3
