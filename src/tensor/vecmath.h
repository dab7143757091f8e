// Element-wise transcendental functions of the model (situ, sigmoid, silu, exp) over arrays, with
// run-time ISA dispatch like the kernels. The scalar forms (libm, in the model's evaluation order)
// are the references; the SIMD forms use polynomial exp/expm1 and stay within a few ulp of them
// (tests/tensor/test_vecmath.cpp states the bounds).
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
};

// For the active ISA (kernels.h), or a given one (falls back to the best available below it).
const VecMath& vecmath();
const VecMath& vecmath(Isa isa);

namespace detail {
void vecmath_avx2(VecMath& v);    // vecmath_avx2.cpp
void vecmath_avx512(VecMath& v);  // vecmath_avx512.cpp
}  // namespace detail

}  // namespace k3
