#include "tensor/vecmath.h"

#include <cmath>
#include <vector>

#include "tensor/ggml_order.h"
#include "tensor/scratch.h"

namespace k3 {

namespace {

// The references: libm, in llama.cpp's order of operations (model.md §9).
float sigmoid1(float x) { return 1.0f / (1.0f + expf(-x)); }

void situ_ref(float* a, const float* b, int64_t n, const SituParams& p) {
  for (int64_t i = 0; i < n; ++i) {
    float t = tanhf(a[i] * p.inv_beta);
    t = t * p.beta;
    t = t * sigmoid1(a[i]);
    const float u = p.lambda > 0 ? tanhf(b[i] * p.inv_lambda) * p.lambda : b[i];
    a[i] = t * u;
  }
}
void sigmoid_ref(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = sigmoid1(x[i]);
}
void silu_ref(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + expf(-x[i]));
}
void exp_ref(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = expf(x[i]);
}
void mad_ref(float* y, const float* x, float v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(x[i], v, y[i]);
}
void softmax_ref(float* z, int64_t n, bool) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = z[i] > m ? z[i] : m;
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    z[i] = expf(z[i] - m);
    s += z[i];
  }
  const float inv = static_cast<float>(1.0 / s);
  for (int64_t i = 0; i < n; ++i) z[i] *= inv;
}

#include "tensor/delta_rule.inc"
#include "tensor/causal_conv.inc"

struct Tables {
  VecMath t[3];
  Tables() {
    // the conv and the delta rule in the AVX2 builds' order: llama.cpp's SSE builds run on no CPU
    // k3 meets
    t[0] = VecMath{situ_ref, sigmoid_ref, silu_ref, exp_ref, mad_ref, softmax_ref, delta_rule_as<8>, causal_conv_as<8>};
    t[1] = t[0];
    detail::vecmath_avx2(t[1]);
    t[2] = t[1];
    detail::vecmath_avx512(t[2]);
  }
};

}  // namespace

const VecMath& vecmath(Isa isa) {
  static const Tables tab;
  switch (usable_isa(isa)) {  // vector math has no AVX-VNNI form
    case Isa::Scalar: return tab.t[0];
    case Isa::Avx2:
    case Isa::AvxVnni: return tab.t[1];
    case Isa::Avx512: return tab.t[2];
  }
  return tab.t[0];
}

const VecMath& vecmath() { return vecmath(active_isa()); }

}  // namespace k3
