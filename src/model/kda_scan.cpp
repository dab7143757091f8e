#include "model/kda_scan.h"

#include <cstring>

namespace k3::model {

namespace {

// 16 float lanes as four 4-lane vectors (GCC vector extension; SSE registers on the baseline
// target): lane l of part p is lane 4p + l.
typedef float V4 __attribute__((vector_size(16)));
typedef int I4 __attribute__((vector_size(16)));
static_assert(kKdaLanes == 16);
struct Acc {
  V4 p[4] = {};
};

inline V4 load(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, V4 v) { std::memcpy(p, &v, sizeof v); }

// Pairwise: lanes l += l + 8, then l += l + 4, l += l + 2, l += l + 1.
inline float combine(const Acc& a) {
  V4 x = (a.p[0] + a.p[2]) + (a.p[1] + a.p[3]);
  x += __builtin_shuffle(x, I4{2, 3, 2, 3});
  return x[0] + x[1];
}

}  // namespace

void kda_token(float* S, int64_t d, const float* q, const float* k, const float* eg, const float* v, float beta,
               float scale, float* o) {
  const int64_t dv = d / kKdaLanes * kKdaLanes;
  for (int64_t j = 0; j < d; ++j) {
    float* Sj = S + j * d;
    Acc acc;
    int64_t i = 0;
    for (; i < dv; i += kKdaLanes)
      for (int p = 0; p < 4; ++p) {
        const V4 s = load(Sj + i + 4 * p) * load(eg + i + 4 * p);
        store(Sj + i + 4 * p, s);
        acc.p[p] += s * load(k + i + 4 * p);
      }
    for (int l = 0; i < d; ++i, ++l) {
      Sj[i] *= eg[i];
      acc.p[l / 4][l % 4] += Sj[i] * k[i];
    }
    const float delta = beta * (v[j] - combine(acc));
    const V4 dl = V4{} + delta;
    acc = Acc{};
    for (i = 0; i < dv; i += kKdaLanes)
      for (int p = 0; p < 4; ++p) {
        const V4 s = load(Sj + i + 4 * p) + load(k + i + 4 * p) * dl;
        store(Sj + i + 4 * p, s);
        acc.p[p] += s * load(q + i + 4 * p);
      }
    for (int l = 0; i < d; ++i, ++l) {
      Sj[i] += k[i] * delta;
      acc.p[l / 4][l % 4] += Sj[i] * q[i];
    }
    o[j] = combine(acc) * scale;
  }
}

}  // namespace k3::model
