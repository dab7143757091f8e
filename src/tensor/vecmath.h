// Element-wise functions of the model (situ, sigmoid, silu, exp, softmax, a fused multiply-add)
// over arrays and KDA's two kernels (delta rule, causal conv), with run-time ISA dispatch like the
// kernels. The scalar forms (libm, in the model's evaluation order) are the references; the SIMD
// exp, sigmoid and situ give their bits (glibc's expf and tanhf in vector form); silu, softmax, the
// delta rule and the conv give llama.cpp's for the level's vector width
// (tests/tensor/test_vecmath.cpp, test_vs_llama.cpp).
#pragma once
#include <cstdint>

#include "tensor/kernels.h"

namespace k3 {

// situ(a, b) = (tanh(a / beta) * beta) * sigmoid(a) * (lambda > 0 ? tanh(b / lambda) * lambda : b),
// with the reciprocals given (model.md §5).
struct SituParams {
  float beta, inv_beta, lambda, inv_lambda;
};

struct VecMath {
  void (*situ)(float* a, const float* b, int64_t n, const SituParams& p);  // a[i] = situ(a[i], b[i])
  void (*sigmoid)(float* x, int64_t n);                                  // x = 1 / (1 + exp(-x))
  void (*silu)(float* x, int64_t n);                                     // x = x / (1 + exp(-x))
  void (*exp)(float* x, int64_t n);                                      // x = exp(x)
  void (*mad)(float* y, const float* x, float v, int64_t n);             // y = x·v + y, fused
  // In-place softmax, p_i = e_i · float(1 / Σ e_i) with the sum in double, as ggml's soft_max: kW
  // lanes at a time with ggml's vector exp (each block's lanes added as its build adds them), then
  // libm's expf for the last n % kW — or, for a row that llama.cpp pads with masked (−inf) entries
  // to a multiple of the vector width (attention over the KV cache: masked_row), the last block too.
  // The scalar form: libm's expf for all.
  void (*softmax)(float* z, int64_t n, bool masked_row);
  // One delta-rule step of one KDA head (model.md §6.3 step 6), S [d][d] with row j over key i:
  // S_j *= eg; u = S_j·k; δ = (v_j − u) beta; S_j += k δ; o_j = (S_j·q) scale. In llama.cpp's
  // order for the level's vector width (delta_rule.inc).
  void (*delta_rule)(float* S, int64_t d, const float* eg, const float* k, const float* q, const float* v,
                     float beta, float scale, float* o);
  // Causal depthwise conv over time (model.md §6.3 step 2) of channels [c0, c1): p, y [T][D]
  // projected inputs and outputs; w [D][K] taps (tap K-1 on the current input); state [D][K-1]
  // previous inputs, oldest first, moved on by T. Summed in llama.cpp's order for the level's vector
  // width (causal_conv.inc).
  void (*causal_conv)(const float* p, const float* w, float* state, int64_t T, int64_t D, int64_t K, int64_t c0,
                      int64_t c1, float* y);
};

// For the active ISA (kernels.h), or a given one (falls back to the best available below it).
const VecMath& vecmath();
const VecMath& vecmath(Isa isa);

namespace detail {
void vecmath_avx2(VecMath& v);    // vecmath_avx2.cpp
void vecmath_avx512(VecMath& v);  // vecmath_avx512.cpp
}  // namespace detail

}  // namespace k3
